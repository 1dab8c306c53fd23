"""Import a Hugging Face decoder (or encoder) as an encoderlab checkpoint: `encoderlab import-hf SRC --out CKPT`.

SRC is a local transformers folder (config.json, safetensors or .bin weights, tokenizer files) of a Llama, Mistral,
Qwen2 or EuroBERT model; a GGUF file of one, read through transformers (which needs the `gguf` package); or
`smollm2`, the pinned SmolLM2-135M GGUF of DATA.md. Our parameter names are Hugging Face's (model/transformer.py), so
importing is mostly a proof that the source computes exactly what our backbone computes:

- whatever our backbone cannot compute exactly is refused, naming what differs: biases that are not all zero
  (Qwen2's q/k/v, `attention_bias=True`), per-head query/key norms (Qwen3), rotary scaling (llama3, yarn, linear,
  dynamic...), a head_dim other than hidden / heads, another activation. All-zero biases are dropped (they add 0).
- a sliding window (Mistral) only matters past the window, so max_position_embeddings is lowered to the window: every
  sequence the imported model accepts is computed exactly.
- a tokenizer without a mask token gets one (the MLM phases of continued pretraining need it) and the embedding
  (and an untied LM head) grows by one row, see `_mask_row`.
- the result is a checkpoint as train/checkpoint.py writes one, minus the optimizer: model.safetensors (fp32),
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

from encoderlab.data.tokenizer import MANIFEST, TextTokenizer, load_tokenizer
from encoderlab.errors import EncoderlabError
from encoderlab.model.config import ModelConfig
from encoderlab.hub.folders import UnsupportedModelError, prepare_out
from encoderlab.train.checkpoint import save_weights_only, weight_mismatches
from encoderlab.hub.source import (
    CAUSAL,
    folder_weights,
    read_config,
    read_gguf,
    require_tokenizer_files,
    resolve_source,
)

# ---- the architecture --------------------------------------------------------------------------------------


def rope_parameters(config) -> dict:
    """transformers 5 keeps `rope_parameters`; older versions `rope_theta` and `rope_scaling`."""
    params = getattr(config, "rope_parameters", None)
    if params:
        return dict(params)
    scaling = getattr(config, "rope_scaling", None) or {}
    return {"rope_type": "default", **scaling, "rope_theta": getattr(config, "rope_theta", 10000.0)}


def sliding_window(config) -> int | None:
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None:
        return window if "sliding_attention" in types else None
    if hasattr(config, "use_sliding_window"):  # Qwen2 before layer_types
        return window if config.use_sliding_window else None
    return window  # Mistral: a set window is used by every layer


def architecture_fields(config, where: Path, notes: list[str]) -> dict:
    """The ModelConfig fields of a supported config, or UnsupportedModelError listing every difference."""
    h, heads = config.hidden_size, config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    rope = rope_parameters(config)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    problems = []
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={config.hidden_act!r}: encoderlab's MLP is SwiGLU with silu")
    head_dim = getattr(config, "head_dim", None)
    if h % heads or head_dim not in (None, h // heads):
        problems.append(f"head_dim={head_dim} with hidden_size={h} and {heads} heads: encoderlab's head_dim is "
                        "hidden_size / num_attention_heads")
    if rope_type != "default":
        problems.append(f"rope_type={rope_type!r} ({rope}): encoderlab implements plain RoPE, no rotary scaling")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        problems.append(f"partial_rotary_factor={rope['partial_rotary_factor']}: encoderlab rotates every dimension")
    if problems:
        raise UnsupportedModelError(f"{where}: this {config.model_type} model differs from encoderlab's architecture: "
                                    + "; ".join(problems))
    max_pos = config.max_position_embeddings
    window = sliding_window(config)
    if window is not None and window < max_pos:
        notes.append(f"sliding window of {window} tokens: max_position_embeddings lowered from {max_pos} to {window}, "
                     "where full attention and the window agree exactly")
        max_pos = window
    return {"hidden_size": h, "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "max_position_embeddings": max_pos, "rope_theta": float(rope["rope_theta"]),
            "rms_norm_eps": float(config.rms_norm_eps), "tie_word_embeddings": bool(config.tie_word_embeddings),
            "initializer_range": float(getattr(config, "initializer_range", 0.02))}


def our_weights(state: dict[str, torch.Tensor], config, where: Path, notes: list[str]) -> dict[str, torch.Tensor]:
    """Rename a bare base model's keys, drop rotary buffers and zero biases, tie the head; fp32."""
    out = {}
    for key, value in state.items():
        if key.endswith("rotary_emb.inv_freq"):
            continue  # recomputed from rope_theta on every call, as transformers does
        out[key if key.startswith(("model.", "lm_head.")) else f"model.{key}"] = value
    biases = [k for k in out if k.endswith(".bias")]
    nonzero = [k for k in biases if out[k].count_nonzero()]
    if nonzero:
        flags = ", ".join(f"{f}={getattr(config, f)}" for f in ("attention_bias", "mlp_bias") if hasattr(config, f))
        raise UnsupportedModelError(f"{where}: {len(nonzero)} of {len(biases)} bias tensors are not zero (first: "
                                    f"{nonzero[0]}; {flags or config.model_type + ' has q/k/v biases'}): "
                                    "encoderlab models have no biases")
    if biases:
        notes.append(f"dropped {len(biases)} bias tensors that are exactly zero")
        out = {k: v for k, v in out.items() if k not in biases}
    embed = out.get("model.embed_tokens.weight")
    if embed is None:
        raise EncoderlabError(f"{where}: the weights hold no embed_tokens.weight: not a decoder checkpoint")
    if config.tie_word_embeddings:
        if "lm_head.weight" in out and not torch.equal(out["lm_head.weight"], embed):
            notes.append("a stored lm_head.weight differs from the embedding but tie_word_embeddings=True: "
                         "transformers uses the embedding, and so does encoderlab")
        out["lm_head.weight"] = embed
    elif "lm_head.weight" not in out:
        raise EncoderlabError(f"{where}: no lm_head.weight and tie_word_embeddings=False: a base model saved without "
                              "its LM head (e.g. LlamaModel); encoderlab needs the head")
    return {k: v.float() for k, v in out.items()}


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
    require_tokenizer_files(folder)
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


# ---- the whole import --------------------------------------------------------------------------------------


def _read_source(folder: Path, gguf: str | None, where: Path, notes: list[str], log: Callable[[str], None]):
    """(config, our architecture fields, our weights, tokenizer, added tokens, source dtype), refusing an
    architecture that is not ours before reading any weights of a folder."""
    tok_dir = None
    try:
        if gguf:
            log(f"reading {where} through transformers (dequantised to fp32; ~20 s for 135M parameters on 1 core)")
            config, state, tok_dir = read_gguf(folder, gguf)
            fields = architecture_fields(config, where, notes)
        else:
            log(f"reading {where}")
            config = read_config(folder)
            fields = architecture_fields(config, where, notes)  # refuse before reading the weights
            state = folder_weights(folder)
        source_dtype = ("GGUF, dequantised to float32 by transformers" if gguf
                        else str(next(iter(state.values())).dtype).replace("torch.", ""))
        weights = our_weights(state, config, where, notes)
        del state
        tok, added = source_tokenizer(tok_dir or folder)
    finally:
        if tok_dir is not None:
            shutil.rmtree(tok_dir, ignore_errors=True)
    return config, fields, weights, tok, added, source_dtype


def import_hf(src: str, out: Path, *, force: bool = False, home: Path | None = None,
              log: Callable[[str], None] = lambda message: None) -> dict:
    """Write the checkpoint `out` from SRC (see the module docstring); returns a summary, also in import.json."""
    started = time.perf_counter()
    folder, gguf = resolve_source(src, home=home)
    where = folder / gguf if gguf else folder
    prepare_out(out, force, keep=where)
    notes: list[str] = []
    config, fields, weights, tok, added, source_dtype = _read_source(folder, gguf, where, notes, log)
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
        "source_config": {k: v for k, v in config.to_dict().items() if k != "quantization_config"},
        "embedding_rows": {"source": rows, "imported": cfg.vocab_size},
        "tokenizer": {"source_token_ids": n_source_tokens, "added_tokens": added, "mask_row": mask_row,
                      **{k: v for k, v in tok.info().items() if k not in ("origin", "added_tokens")}},
        "notes": notes, "model_config": cfg.model_dump(),
    }
    state_json = {"step": 0, "reason": "imported", "objective": "clm" if config.model_type in CAUSAL else "mlm",
                  "schedule": None, "source": str(where.resolve())}
    save_weights_only(out, weights, cfg, tok, state_json, {"import.json": record})
    parameters = cfg.num_parameters()
    log(f"imported {config.model_type} ({parameters / 1e6:.1f}M parameters) -> {out}")
    return {"checkpoint": str(out), "source": str(where), "model_type": config.model_type, "parameters": parameters,
            "vocab_size": cfg.vocab_size, "added_tokens": added, "notes": notes, "model": cfg.model_dump(),
            "seconds": round(time.perf_counter() - started, 1)}
