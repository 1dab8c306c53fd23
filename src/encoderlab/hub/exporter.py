"""Export a checkpoint as a native transformers folder: `encoderlab export CKPT --out DIR --as eurobert|llama`
(or `--as sentence-transformers`: the EuroBERT body as a SentenceTransformer folder, hub/sentence.py).

`eurobert` writes `EuroBertConfig` / `EuroBertForMaskedLM` (bidirectional: fill-mask, and AutoModel,
AutoModelForSequenceClassification, AutoModelForTokenClassification load it); `llama` writes `LlamaConfig` /
`LlamaForCausalLM`. Both are built into transformers, so no `trust_remote_code`. The folder holds safetensors
weights, the tokenizer (with its mask token, so `pipeline("fill-mask")` works) and a model card.

The tokenizer frames text as encoderlab trained on it: pretraining packs `<bos> document <eos>` and fine-tuning
encodes `<bos> a <eos>` or `<bos> a <eos> b <eos>`, so the eurobert export's tokenizer adds exactly these tokens. A
llama export keeps a tokenizer's own framing when it has one (an imported Llama's `<bos> text`), else adds `<bos>`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tokenizers.processors import TemplateProcessing

from encoderlab.io import atomic_dir
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.errors import EncoderlabError
from encoderlab.hub.hf import hf_config
from encoderlab.hub.card import evaluation_summaries, model_card, training_info
from encoderlab.hub.folders import prepare_out
from encoderlab.hub import sentence

KINDS = ("eurobert", "llama", sentence.KIND)


def objective_note(objective: str | None, kind: str) -> str | None:
    """A warning when the export's attention is not the one the model was last trained with."""
    if not objective:
        return None
    if kind == "llama" and objective.startswith("mlm"):
        return (f"the checkpoint was last trained with {objective} (bidirectional): as a causal Llama it sees only "
                "the left context it was not trained on; its generations will be poor")
    if kind == "eurobert" and objective == "clm":
        return ("the checkpoint was last trained with clm (causal): as a bidirectional EuroBERT it sees context it "
                "was not trained on; fill-mask predictions are meaningless until it is trained with MLM or fine-tuned")
    return None


def frame_tokenizer(tok: TextTokenizer, kind: str) -> str:
    """Set the tokenizer's post-processor to encoderlab's framing (module docstring); returns what it adds."""
    bos, eos = tok.token(tok.bos_id), tok.token(tok.eos_id)
    specials = list({bos: tok.bos_id, eos: tok.eos_id}.items())  # one entry when BOS and EOS are one token
    if kind == "eurobert":
        tok.tokenizer.post_processor = TemplateProcessing(
            single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} $B:1 {eos}:1", special_tokens=specials)
        return f"{bos} text {eos}"
    plain = tok.tokenizer.encode("a", add_special_tokens=False).ids
    framed = tok.tokenizer.encode("a", add_special_tokens=True).ids
    if framed != plain:
        return "the tokenizer's own special tokens"
    tok.tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B:1", special_tokens=[(bos, tok.bos_id)])
    return f"{bos} text"


def hf_model(model, cfg, kind: str):
    """The transformers twin of our TransformerLM, holding its weights (identical names: a strict load)."""
    from transformers import EuroBertForMaskedLM, LlamaForCausalLM

    cls = EuroBertForMaskedLM if kind == "eurobert" else LlamaForCausalLM
    hf = cls(hf_config(cfg, kind)).eval()
    hf.load_state_dict(model.state_dict(), strict=True)
    return hf


def export_checkpoint(checkpoint: str | Path, out: Path, kind: str, *, evaluation: Path | None = None,
                      force: bool = False, log: Callable[[str], None] = lambda message: None) -> dict:
    """Write the transformers folder `out` from a checkpoint (or a run folder's latest checkpoint)."""
    from encoderlab.train import checkpoint as ckpt

    if kind not in KINDS:
        raise EncoderlabError(f"--as {kind!r} is not an export format; choose eurobert (bidirectional, fill-mask), "
                              "llama (causal, text generation) or sentence-transformers (embeddings)")
    started = time.perf_counter()
    path = ckpt.resolve(checkpoint)
    prepare_out(out, force, keep=path)
    info = training_info(path, ckpt.load_state(path))
    evaluations = evaluation_summaries(path, evaluation)
    model, cfg, tok = ckpt.load_model(path)
    body = sentence.BODY if kind == sentence.KIND else kind
    note = objective_note(info.get("objective"), body)
    if note:
        log(f"note: {note}")
    framing = frame_tokenizer(tok, body)
    hf = hf_model(model, cfg, body)
    card = model_card(body, cfg, tok, info, evaluations, framing, note)
    if kind == sentence.KIND:
        hf, card = hf.model, sentence.card(card)  # the bare encoder (module docstring of hub/sentence.py)
    with atomic_dir(out) as tmp:
        hf.save_pretrained(str(tmp))  # safetensors: the only format transformers 5 writes (and 4.x's default)
        tok.save(tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        if kind == sentence.KIND:
            sentence.write_modules(tmp, cfg)
    log(f"exported {path} as {type(hf).__name__} -> {out}")
    return {"export": str(out), "checkpoint": str(path), "as": kind, "class": type(hf).__name__,
            "parameters": cfg.num_parameters(), "tokenizer_framing": framing, "note": note,
            "training": info, "evaluations": [e["path"] for e in evaluations],
            "seconds": round(time.perf_counter() - started, 1)}
