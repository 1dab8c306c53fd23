"""Import a Hugging Face decoder (or encoder) as an encoderlab checkpoint: `encoderlab import-hf SRC --out CKPT`.

SRC is a local transformers folder (config.json, safetensors or .bin weights, tokenizer files) of a Llama (3.x),
Mistral, Qwen2/2.5, Qwen3 or EuroBERT model, or of the paper's `sl_model` checkpoints (a Llama body, read without
their code: hub/slmodel.py); a GGUF file of one, read through transformers (which needs the `gguf` package); or
`smollm2`, the pinned SmolLM2-135M GGUF of docs/data.md. Our parameter names are Hugging Face's
(model/transformer.py), so importing is mostly a proof that the source computes exactly what our backbone computes:

- the families' variants (Qwen2's q/k/v biases, Qwen3's q/k norms and head_dim, Llama 3's rope scaling, Mistral's
  sliding window) become fields of the model config (hub/families.py); whatever our backbone cannot compute exactly
  is refused, naming what differs (other rotary scalings, non-zero MLP biases, another activation...).
- a tokenizer without a mask token gets one (the MLM phases of continued pretraining need it) and the embedding
  (and an untied LM head) grows by one row, see `_mask_row`.
- a body saved without its LM head (a LlamaModel save, an encoder export) gets a fresh or tied one
  (hub/families.py `lm_head`), said in a note and in import.json's `lm_head`.
- the result is a checkpoint as runs/checkpoint.py writes one, minus the optimizer: model.safetensors (fp32),
  model_config.json, tokenizer/, state.json (step 0, reason 'imported'), plus import.json recording the mapping.
  Continue pretraining from it with `init.from_weights`; it has no optimizer or data position to branch from.
"""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import ValidationError

from encoderlab.core.errors import EncoderlabError, option
from encoderlab.data.tokenizer import MANIFEST, TextTokenizer, code_not_run, load_tokenizer
from encoderlab.hub.families import HEADS, architecture_fields, our_weights
from encoderlab.hub.folders import UnsupportedModelError, prepare_out
from encoderlab.hub.source import (
    CAUSAL,
    folder_weights,
    read_config,
    read_gguf,
    resolve_source,
)
from encoderlab.hub.slmodel import SL_MODEL, remote_code_note, tokenizer_folder
from encoderlab.model.config import ModelConfig
from encoderlab.runs.checkpoint import refuse_non_finite, save_weights_only, weight_mismatches
from encoderlab.runs.encoders import require_tokenizer
from encoderlab.core.counts import parameters_text

# ---- the architecture (hub/families.py maps the config and the weights) ------------------------------------


def check_against_model(weights: dict[str, torch.Tensor], cfg: ModelConfig, where: Path) -> None:
    from encoderlab.model.transformer import TransformerLM

    with torch.device("meta"):  # shapes only, no memory
        expected = TransformerLM(cfg).state_dict()
    problems = weight_mismatches(weights, expected, source="source", target="encoderlab")
    if problems:
        raise UnsupportedModelError(f"{where}: the weights do not fit encoderlab's architecture: {problems}")


# ---- tokenizer and mask token ------------------------------------------------------------------------------


def source_tokenizer(folder: Path) -> tuple[TextTokenizer, list[str]]:
    """(tokenizer with a mask token, the special tokens added now); load_tokenizer adds a missing mask. Read as
    transformers reads it, so that its special tokens, BOS/EOS behaviour, chat template and unk token are the
    source's (kept in the checkpoint's tokenizer/ and in every export of it)."""
    require_tokenizer(folder)
    before = json.loads((folder / MANIFEST).read_text()).get("added_tokens", []) if (folder / MANIFEST).exists() else []
    tok = load_tokenizer(folder, as_transformers=True)
    return tok, tok.added_tokens[len(before):]


def _mask_row(weights: dict[str, torch.Tensor], mask_id: int, n_tokens: int, tied: bool) -> str:
    """Give the new mask token its own row: appended, or overwriting a padding row no token id reaches.

    The row is the mean of the token rows. As an LM-head row it scores every position with the average logit, so
    the model does not suddenly predict the new token (Hewitt, "Initializing new word embeddings", 2021). As an
    input it points where the average token points but is shorter than almost every row (averaging cancels what the
    rows do not share: for SmolLM2 its norm 2.18 is at the 1st percentile of the token rows', median 3.15, smallest
    1.79); rescaling it to a typical norm would raise its logit above the average, which the head must not do. A
    random row of initializer_range scale would be far smaller still, and a zero row a degenerate input.
    """
    names = ["model.embed_tokens.weight"] + ([] if tied else ["lm_head.weight"])
    rows = weights[names[0]].shape[0]
    for name in names:
        matrix = weights[name]
        mean = matrix[: min(n_tokens, rows)].mean(dim=0, keepdim=True)  # (1, C)
        if mask_id >= rows:
            weights[name] = torch.cat([matrix, mean.expand(mask_id + 1 - rows, -1)])
        else:
            weights[name] = matrix.clone()
            weights[name][mask_id] = mean[0]
    if tied:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    how = "appended" if mask_id >= rows else "written over the unused padding row"
    return f"row {mask_id} {how}, initialised to the mean of the {min(n_tokens, rows)} token rows"


def sl_model_notes(config, tok: TextTokenizer, where: Path, notes: list[str]) -> None:
    """What an sl_model import takes from its config (hub/slmodel.py): the mask token and the attention."""
    if tok.mask_id != config.mask_token_id:  # e.g. two tokens of one string: the tokenizer found the other
        raise EncoderlabError(f"{where}: config.json's mask_token_id={config.mask_token_id} but its tokenizer's mask "
                              f"token {tok.token(tok.mask_id)!r} has id {tok.mask_id}")
    notes.append(f"mask token {tok.token(tok.mask_id)!r} (id {tok.mask_id}): config.json's mask_token_id; "
                 f"attention {'causal' if config.is_causal else 'bidirectional'} (is_causal: "
                 f"{str(config.is_causal).lower()}), so the last objective is {'clm' if config.is_causal else 'mlm'}")
    if note := remote_code_note(json.loads((where / "config.json").read_text(encoding="utf-8"))):
        notes.append(note)


# ---- the whole import --------------------------------------------------------------------------------------


def _read_source(folder: Path, gguf: str | None, where: Path, notes: list[str], log: Callable[[str], None],
                 head: str | None, seed: int, shown: str | Path):
    """(config, our architecture fields, our weights, how the head starts, tokenizer, added tokens, source dtype),
    refusing an architecture that is not ours before reading any weights of a folder. `shown`: the source as the
    user named it (hub/source.py `read_config`)."""
    tok_dir = None
    try:
        if gguf:
            log(f"reading {where} through transformers (dequantised to fp32; ~20 s for 135M parameters on 1 core)")
            config, state, tok_dir = read_gguf(folder, gguf)
            fields = architecture_fields(config, where, notes)
        else:
            config = read_config(folder, shown)
            fields = architecture_fields(config, where, notes)  # refuse before reading the weights
            log(f"reading {where}")
            state = folder_weights(folder)
            if config.model_type == SL_MODEL:  # its tokenizer alone: transformers would read the config.json too
                tok_dir = tokenizer_folder(folder, config.mask_token_id)
        refuse_non_finite(state, where)  # before any weight is renamed or written
        source_dtype = ("GGUF, dequantised to float32 by transformers" if gguf
                        else str(next(iter(state.values())).dtype).replace("torch.", ""))
        weights, started = our_weights(state, config, fields, where, notes, head, seed)
        del state
        tok, added = source_tokenizer(tok_dir or folder)
    finally:
        if tok_dir is not None:
            shutil.rmtree(tok_dir, ignore_errors=True)
    return config, fields, weights, started, tok, added, source_dtype


def import_hf(src: str, out: Path, *, force: bool = False, home: Path | None = None, head: str | None = None,
              head_seed: int = 0, log: Callable[[str], None] = lambda message: None) -> dict:
    """Write the checkpoint `out` from SRC (see the module docstring); returns a summary, also in import.json.
    `head`, `head_seed`: how the LM head of a body saved without one starts (hub/families.py `lm_head`)."""
    began = time.perf_counter()
    if head not in (None, *HEADS):
        raise EncoderlabError(f"{option('head', head, quote=True)}: choose fresh (a new untied head, the default) or "
                              "tied (the embedding), for a source saved without its LM head")
    folder, gguf = resolve_source(src, home=home)
    where = folder / gguf if gguf else folder
    prepare_out(out, force, keep=where, imports=True)
    notes: list[str] = []
    # An encoder that needs no import is named as given: its commands read SRC, not the 0_Transformer/ it holds
    shown = src if Path(src).expanduser().exists() else folder
    config, fields, weights, started, tok, added, source_dtype = _read_source(folder, gguf, where, notes, log, head,
                                                                              head_seed, shown)
    if config.model_type == SL_MODEL:
        sl_model_notes(config, tok, where, notes)
    elif not gguf and (note := code_not_run(folder)):
        notes.append(note)
    tok.origin = f"{where} (imported)"
    rows = weights["model.embed_tokens.weight"].shape[0]
    n_source_tokens = max(tok.tokenizer.get_vocab(with_added_tokens=True).values()) + 1 - len(added)
    if n_source_tokens > rows:
        raise EncoderlabError(f"{where}: the tokenizer has {n_source_tokens} token ids but the embedding matrix only "
                              f"{rows} rows: ids {rows}..{n_source_tokens - 1} would index past it (is this the "
                              "model's own tokenizer?)")
    mask_row = None
    if tok.token(tok.mask_id) in added:
        mask_row = _mask_row(weights, tok.mask_id, n_source_tokens, fields["tie_word_embeddings"])
        notes.append(f"added mask token {tok.token(tok.mask_id)!r} (id {tok.mask_id}): {mask_row}")
    try:
        cfg = ModelConfig(**fields, vocab_size=weights["model.embed_tokens.weight"].shape[0],
                          bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                          mask_token_id=tok.mask_id)
    except ValidationError as exc:
        raise UnsupportedModelError(f"{where}: the imported shapes are not a valid encoderlab model: {exc}") from exc
    check_against_model(weights, cfg, where)
    record = {
        "source": str(where.resolve()), "format": "gguf" if gguf else "transformers folder",
        "model_type": config.model_type, "architectures": list(getattr(config, "architectures", None) or []),
        "source_dtype": source_dtype, "stored_dtype": "float32",
        "source_config": {**{k: v for k, v in config.to_dict().items() if k != "quantization_config"},
                          "model_type": config.model_type},
        "embedding_rows": {"source": rows, "imported": cfg.vocab_size},
        "tokenizer": {"source_token_ids": n_source_tokens, "added_tokens": added, "mask_row": mask_row,
                      **{k: v for k, v in tok.info().items() if k not in ("origin", "added_tokens")}},
        "lm_head": started, "notes": notes, "model_config": cfg.model_dump(),
    }
    causal = config.model_type in CAUSAL and getattr(config, "is_causal", True)  # a family's encoder is no decoder
    state_json = {"step": 0, "reason": "imported", "objective": "clm" if causal else "mlm",
                  "schedule": None, "source": str(where.resolve())}
    save_weights_only(out, weights, cfg, tok, state_json, {"import.json": record})
    parameters = cfg.num_parameters()
    log(f"imported {config.model_type} ({parameters_text(parameters)} parameters) -> {out}")
    return {"checkpoint": str(out), "source": str(where), "model_type": config.model_type, "parameters": parameters,
            "vocab_size": cfg.vocab_size, "added_tokens": added, "notes": notes, "model": cfg.model_dump(),
            "seconds": round(time.perf_counter() - began, 1)}
