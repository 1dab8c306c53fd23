"""Which ModelConfig a transformers decoder config is, and its weights under our names (for hub/importer.py).

Llama (3.x with its `llama3` rope scaling), Mistral (sliding window), Qwen2/2.5 (q/k/v biases), Qwen3 (q/k norms,
head_dim != hidden / heads) and EuroBERT are all the one backbone with the variant fields of model/config.py set.
The variants are decided by the config alone, so a study can plan from config.json before importing. Whatever the
backbone cannot compute exactly is refused, naming every difference: other rotary scalings (yarn, linear, dynamic,
longrope...), partial rotary embeddings, another activation, a window on some layers only, non-zero MLP biases.
"""
from __future__ import annotations

from pathlib import Path

import torch

from encoderlab.core.errors import EncoderlabError, option, option_name
from encoderlab.hub.folders import UnsupportedModelError


def rope_parameters(config) -> dict:
    """transformers 5 keeps `rope_parameters`; older versions `rope_theta` and `rope_scaling`."""
    params = getattr(config, "rope_parameters", None)
    if params:
        return dict(params)
    scaling = getattr(config, "rope_scaling", None) or {}
    return {"rope_type": "default", **scaling, "rope_theta": getattr(config, "rope_theta", 10000.0)}


def sliding_window(config, problems: list[str]) -> int | None:
    """The window every layer uses, or None; a window on some layers only is a problem (ours is on all)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    if hasattr(config, "use_sliding_window") and not config.use_sliding_window:  # Qwen2/Qwen3
        return None
    types = getattr(config, "layer_types", None)
    if types is None or set(types) == {"sliding_attention"}:
        return window  # Mistral: a set window is used by every layer
    if "sliding_attention" in types:
        problems.append(f"a sliding window of {window} on {types.count('sliding_attention')} of {len(types)} layers "
                        "(encoderlab's sliding_window applies to every layer)")
    return None


def attention_bias(config) -> str:
    """ModelConfig.attention_bias of a config: Qwen2 always has q/k/v biases; `attention_bias=True` all four."""
    if config.model_type == "qwen2":
        return "qkv"
    if config.model_type != "mistral" and getattr(config, "attention_bias", False):  # Mistral's class has none
        return "qkvo"
    return "none"


def rope_scaling(rope: dict, problems: list[str]) -> dict | None:
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        problems.append(f"partial_rotary_factor={rope['partial_rotary_factor']}: encoderlab rotates every dimension")
    if rope_type == "default":
        return None
    if rope_type != "llama3":
        problems.append(f"rope_type={rope_type!r} ({rope}): encoderlab implements plain RoPE and the llama3 scaling")
        return None
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return {"rope_type": "llama3", **{k: rope[k] for k in keys}}


def architecture_fields(config, where: Path, notes: list[str]) -> dict:
    """The ModelConfig fields of a supported config, or UnsupportedModelError listing every difference."""
    h, heads = config.hidden_size, config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    rope = rope_parameters(config)
    problems: list[str] = []
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={config.hidden_act!r}: encoderlab's MLP is SwiGLU with silu")
    scaling = rope_scaling(rope, problems)
    window = sliding_window(config, problems)
    if problems:
        raise UnsupportedModelError(f"{where}: this {config.model_type} model differs from encoderlab's architecture: "
                                    + "; ".join(problems))
    head_dim = getattr(config, "head_dim", None)
    variants = {"attention_bias": attention_bias(config), "qk_norm": config.model_type == "qwen3",
                "head_dim": head_dim if head_dim and (h % heads or head_dim != h // heads) else None,
                "rope_scaling": scaling, "sliding_window": window}
    return {"hidden_size": h, "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "max_position_embeddings": config.max_position_embeddings, "rope_theta": float(rope["rope_theta"]),
            "rms_norm_eps": float(config.rms_norm_eps), "tie_word_embeddings": bool(config.tie_word_embeddings),
            "initializer_range": float(getattr(config, "initializer_range", 0.02)),
            **{k: v for k, v in variants.items() if v not in (None, False, "none")}}


def our_weights(state: dict[str, torch.Tensor], config, fields: dict, where: Path, notes: list[str],
                head: str | None = None, seed: int = 0) -> tuple[dict[str, torch.Tensor], dict]:
    """Rename a bare base model's keys, drop rotary buffers and biases we have no place for if they are zero,
    place the LM head (`lm_head`); fp32. Returns the weights and how the head starts."""
    out = {}
    for key, value in state.items():
        if key.endswith("rotary_emb.inv_freq"):
            continue  # recomputed from rope_theta on every call, as transformers does
        out[key if key.startswith(("model.", "lm_head.")) else f"model.{key}"] = value
    held = {"none": (), "qkv": ("q", "k", "v"), "qkvo": ("q", "k", "v", "o")}[fields.get("attention_bias", "none")]
    ours = tuple(f".self_attn.{p}_proj.bias" for p in held)
    biases = [k for k in out if k.endswith(".bias") and not k.endswith(ours)]
    nonzero = [k for k in biases if out[k].count_nonzero()]
    if nonzero:
        flags = ", ".join(f"{f}={getattr(config, f)}" for f in ("attention_bias", "mlp_bias") if hasattr(config, f))
        raise UnsupportedModelError(f"{where}: {len(nonzero)} of {len(biases)} bias tensors are not zero (first: "
                                    f"{nonzero[0]}; {flags}): encoderlab holds attention biases only (q/k/v as "
                                    "Qwen2, q/k/v/o as attention_bias=True)")
    if biases:
        notes.append(f"dropped {len(biases)} bias tensors that are exactly zero")
        out = {k: v for k, v in out.items() if k not in biases}
    if out.get("model.embed_tokens.weight") is None:
        raise EncoderlabError(f"{where}: the weights hold no embed_tokens.weight: not a decoder checkpoint")
    started = lm_head(out, config, fields, where, notes, head, seed)
    return {k: v.float() for k, v in out.items()}, started


HEADS = ("fresh", "tied")  # how the LM head of a body saved without one starts (`lm_head`)


def lm_head(out: dict[str, torch.Tensor], config, fields: dict, where: Path, notes: list[str], head: str | None,
            seed: int) -> dict:
    """Place `lm_head.weight` in `out`: the source's own, or the embedding when tied. A body saved without its head
    (no lm_head.weight, tie_word_embeddings false: a LlamaModel save, an encoder export) gets one as `head` says:
    `fresh` (the default), a new untied matrix drawn as encoderlab initialises a head, normal(0,
    initializer_range), from `seed`; `tied`, the embedding (the model becomes tied). Fine-tuning never reads the
    head; continued pretraining trains it. Returns the head's start, for import.json; notes say it."""
    embed, tied = out["model.embed_tokens.weight"], bool(config.tie_word_embeddings)
    if head is not None and (tied or "lm_head.weight" in out):
        own = "tie_word_embeddings=True" if tied else "an lm_head.weight"
        raise EncoderlabError(f"{option('head', head)}: {where} has its own LM head ({own}); {option_name('head')} "
                              "applies only to a body saved without one")
    if tied:
        if "lm_head.weight" in out and not torch.equal(out["lm_head.weight"], embed):
            notes.append("a stored lm_head.weight differs from the embedding but tie_word_embeddings=True: "
                         "transformers uses the embedding, and so does encoderlab")
        out["lm_head.weight"] = embed
        return {"in_source": "tied to the embedding", "start": "source"}
    if "lm_head.weight" in out:
        return {"in_source": "lm_head.weight", "start": "source"}
    missing = "the source has no LM head (no lm_head.weight, tie_word_embeddings=False)"
    if head == "tied":
        fields["tie_word_embeddings"] = True
        out["lm_head.weight"] = embed
        notes.append(f"{missing}: the head is tied to the embedding (--head tied)")
        return {"in_source": None, "start": "tied"}
    std = fields["initializer_range"]
    generator = torch.Generator().manual_seed(seed)
    out["lm_head.weight"] = torch.empty(embed.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
    notes.append(f"{missing}: a fresh untied head, normal(0, {std}) as encoderlab initialises one, seed {seed} "
                 "(--head tied ties it to the embedding instead)")
    return {"in_source": None, "start": "fresh", "std": std, "seed": seed}
