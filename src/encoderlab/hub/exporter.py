"""Export a checkpoint as a native transformers folder: `encoderlab export CKPT --out DIR --as KIND [--attention A]`
(or `--as sentence-transformers`: the checkpoint's own family's body as a SentenceTransformer folder, hub/sentence.py).

`eurobert` writes `EuroBertConfig` / `EuroBertForMaskedLM` (bidirectional: fill-mask, and AutoModel,
AutoModelForSequenceClassification, AutoModelForTokenClassification load it); `llama`, `mistral`, `qwen2` and
`qwen3` write their family's config and, with causal attention, `*ForCausalLM`, or, bidirectional, the bare `*Model`
with `is_causal: false` (an encoder: AutoModel and the family's task classes load it). A checkpoint last trained with
CLM (an imported decoder too) exports causal, any other (MLM) bidirectional, unless `--attention` says otherwise.
Each kind holds only the backbone variants its class computes (hub/hf.py `refusal`: an imported Qwen3 exports
--as qwen3). All are built into transformers, so no `trust_remote_code`. The folder holds safetensors weights, the
tokenizer (with its mask token, so `pipeline("fill-mask")` works) and a model card.

The tokenizer frames text as the model was last trained on it. A checkpoint trained by encoderlab saw `<bos> document
<eos>` in pretraining and `<bos> a <eos>` or `<bos> a <eos> b <eos>` in fine-tuning, so its bidirectional exports add
exactly these tokens and its causal exports `<bos> text` (the prompt of a generation). An imported checkpoint not
trained further is still the source model: its exports keep the source tokenizer's own post-processor (SmolLM2's
adds nothing, Llama-2's `<s> text`), so they encode every text as the source does. Either way the folder keeps the
tokenizer's chat template, unk and other special tokens, and `model_max_length` is the model's context.

`config.json` is written for transformers 4.x and 5.x alike: 5.x writes only `rope_parameters`, which 4.x ignores
(it would run with rope theta 10,000), so the top-level `rope_theta` / `rope_scaling` that 4.x reads are added.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers.processors import TemplateProcessing

from encoderlab.core.errors import EncoderlabError, option, warn
from encoderlab.core.io import atomic_dir
from encoderlab.core.quiet import quiet_transformers
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.hub import sentence
from encoderlab.hub.card import evaluation_summaries, model_card, public, training_info
from encoderlab.hub.folders import prepare_out
from encoderlab.hub.hf import CLASSES, ENCODERS, Target, family, hf_config, refusal
from encoderlab.hub.slmodel import SL_MODEL
from encoderlab.model.transformer import count_parameters

KINDS = (*CLASSES, sentence.KIND)
ATTENTIONS = ("bidirectional", "causal")


def objective_note(objective: str | None, target: Target) -> str | None:
    """A warning when the export's attention is not the one the model was last trained with."""
    if not objective:
        return None
    if target.causal and objective.startswith("mlm"):
        return (f"the checkpoint was last trained with {objective} (bidirectional): as a causal {target.body} it sees "
                "only the left context it was not trained on; its generations will be poor")
    if not target.causal and objective == "clm":
        return (f"the checkpoint was last trained with clm (causal): as a bidirectional {target.cls} it sees context "
                "it was not trained on; its predictions and hidden states are poor until it is trained with MLM or "
                "fine-tuned")
    return None


def own_family(cfg, info: dict) -> str:
    """The body a sentence encoder of this checkpoint is built on: the imported source's family (also after
    continued pretraining), else EuroBERT (encoderlab's own encoders) when it holds the model, else the family that
    does (hub/hf.py `family`)."""
    source = info.get("source_model_type")
    source = "llama" if source == SL_MODEL else source  # the paper's checkpoints are Llama bodies
    if source in CLASSES and refusal(cfg, source) is None:
        return source
    return "eurobert" if refusal(cfg, "eurobert") is None else family(cfg)


def check_request(kind: str, attention: str | None) -> None:
    """Refuse an export format or attention that does not exist, or a causal attention for an encoder format; the
    two are named as the caller's user gives them (`--as`, `--attention`; `kind=`, `attention=` in Python)."""
    if kind not in KINDS:
        raise EncoderlabError(f"{option('as', kind, quote=True)} is not an export format; choose llama, "
                              "mistral, qwen2, qwen3 (the family's encoder or causal LM), eurobert (bidirectional, "
                              "fill-mask) or sentence-transformers (embeddings)")
    if attention not in (None, *ATTENTIONS):
        raise EncoderlabError(f"{option('attention', attention, quote=True)}: choose bidirectional or causal (or "
                              "leave it out: causal for a checkpoint last trained with clm, else bidirectional)")
    if kind in ("eurobert", sentence.KIND) and attention == "causal":
        raise EncoderlabError(f"{option('attention', 'causal')}: {option('as', kind)} is a bidirectional "
                              f"encoder; a causal export is {option('as', 'llama')}, mistral, qwen2 or qwen3")


def export_target(kind: str, attention: str | None, cfg, info: dict) -> Target:
    """What `--as kind --attention attention` (checked) writes for this checkpoint, or a one-line refusal."""
    fixed = kind in ("eurobert", sentence.KIND)
    body = own_family(cfg, info) if kind == sentence.KIND else kind
    causal = not fixed and (attention == "causal" if attention else info.get("objective") in (None, "clm"))
    problem = refusal(cfg, body, asked=kind)
    if problem:
        raise EncoderlabError(problem)
    bare = kind == sentence.KIND or (not causal and body != "eurobert")
    return Target(kind, body, causal, ENCODERS[body] if bare else CLASSES[body][1])


def frame_tokenizer(tok: TextTokenizer, causal: bool, *, as_source: bool) -> str:
    """Set the tokenizer's post-processor to the framing of the module docstring (`as_source`: the imported source's
    own, left as it is); returns what it adds."""
    if not as_source:
        bos, eos = tok.token(tok.bos_id), tok.token(tok.eos_id)
        specials = list({bos: tok.bos_id, eos: tok.eos_id}.items())  # one entry when BOS and EOS are one token
        single, pair = (f"{bos} $A", f"{bos} $A $B:1") if causal else (
            f"{bos} $A {eos}", f"{bos} $A {eos} $B:1 {eos}:1")
        tok.tokenizer.post_processor = TemplateProcessing(single=single, pair=pair, special_tokens=specials)
    return framing(tok)


def framing(tok: TextTokenizer) -> str:
    """What the tokenizer adds around one text, e.g. `<bos> text <eos>`, or `text` when it adds nothing."""
    plain = tok.tokenizer.encode("a", add_special_tokens=False).ids
    framed = tok.tokenizer.encode("a", add_special_tokens=True).ids
    at = next(i for i in range(len(framed) - len(plain) + 1) if framed[i:i + len(plain)] == plain)
    return " ".join([*map(tok.token, framed[:at]), "text", *map(tok.token, framed[at + len(plain):])])


def compatible_config(folder: Path) -> None:
    """Add to config.json the rope keys transformers 4.x reads beside the `rope_parameters` of 5.x: 4.x loads a
    config without `rope_theta` silently with theta 10,000. Both versions then read the same rotary embedding."""
    file = folder / "config.json"
    config = json.loads(file.read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        config["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
        file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def hf_model(model, cfg, target: Target):
    """The transformers twin of our TransformerLM, holding its weights (identical names: a strict load); a bare
    `*Model` holds the body alone (no LM head, which AutoModel would warn is unused)."""
    import transformers

    bare = target.cls == ENCODERS[target.body]
    hf = getattr(transformers, target.cls)(hf_config(cfg, target.body, causal=target.causal)).eval()
    hf.load_state_dict(model.model.state_dict() if bare else model.state_dict(), strict=True)
    return hf


def export_checkpoint(checkpoint: str | Path, out: Path, kind: str | None, *, attention: str | None = None,
                      evaluation: Path | None = None, force: bool = False,
                      log: Callable[[str], None] = lambda message: None) -> dict:
    """Write the transformers folder `out` from a checkpoint (or a run folder's latest checkpoint)."""
    from encoderlab.hub.continued_export import export_continued
    from encoderlab.runs.encoders import is_continued
    from encoderlab.runs import checkpoint as ckpt

    path = ckpt.resolve(checkpoint)
    if is_continued(path):
        if attention == "causal":
            raise EncoderlabError(f"{option('attention', 'causal')}: {path} is a continued masked-LM model, "
                                  "which attends both ways")
        return export_continued(path, out, kind, evaluation=evaluation, force=force, log=log)
    kind = kind or "eurobert"
    check_request(kind, attention)
    started = time.perf_counter()
    model, cfg, tok = ckpt.load_model(path)
    info = training_info(path, ckpt.load_state(path))
    try:
        target = export_target(kind, attention, cfg, info)
    except EncoderlabError as e:
        raise EncoderlabError(f"{path}: {e}") from None
    prepare_out(out, force, keep=path)
    evaluations = evaluation_summaries(path, evaluation, log)
    note = objective_note(info.get("objective"), target)
    if note:
        warn(note, log, label="note")
    # a sentence encoder embeds text framed as the retrieval evaluation frames it, whatever the source did
    framing = frame_tokenizer(tok, target.causal, as_source=info.get("reason") == "imported" and kind != sentence.KIND)
    hf = hf_model(model, cfg, target)
    parameters = count_parameters(hf)  # what the folder holds: a bare encoder has no LM head
    card = model_card(target, cfg, tok, info, evaluations, framing, note, out.name, parameters)
    with atomic_dir(out) as tmp:
        with quiet_transformers():  # safetensors: the only format transformers 5 writes (and 4.x's default)
            hf.save_pretrained(str(tmp))
        compatible_config(tmp)
        tok.save(tmp, model_max_length=cfg.max_position_embeddings, origin=public(tok.origin))  # no local path
        (tmp / "README.md").write_text(card, encoding="utf-8")
        if kind == sentence.KIND:
            sentence.write_modules(tmp, cfg)
    log(f"exported {path} as {type(hf).__name__} -> {out}")
    return {"export": str(out), "checkpoint": str(path), "as": kind, "class": type(hf).__name__,
            "attention": "causal" if target.causal else "bidirectional",
            "parameters": parameters, "tokenizer_framing": framing, "note": note,
            "training": info, "evaluations": [e["path"] for e in evaluations],
            "seconds": round(time.perf_counter() - started, 1)}
