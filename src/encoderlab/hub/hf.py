"""The bridge to Hugging Face `transformers`: our parameter names are theirs, so models map by config alone.

Each export kind is a built-in transformers class that loads our state dict with `strict=True`: `LlamaForCausalLM`,
`MistralForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM` (causal) and `EuroBertForMaskedLM` (bidirectional).
A kind holds only the backbone variants its class computes (`refusal`): a Qwen3 always normalises q and k, a Qwen2
always has q/k/v biases, Llama and EuroBERT have no sliding window, Mistral no biases.

An encoder of a decoder family is its bare `*Model` with `is_causal: false` in its config: transformers (5.2 and later,
measured in docs/hf.md) then builds bidirectional masks, and for Mistral and Qwen2 the bidirectional window (keys at
most `sliding_window` positions away on either side), which is what encoderlab computes with `causal=False`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from encoderlab.core.errors import option
from encoderlab.model.config import ModelConfig

HFKind = Literal["llama", "mistral", "qwen2", "qwen3", "eurobert"]
CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
           "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
           "eurobert": ("EuroBertConfig", "EuroBertForMaskedLM")}
# Per kind: the attention_bias values its class can hold, whether it has q/k norms (always or never), a window.
HOLDS = {"llama": ({"none", "qkvo"}, False, False), "mistral": ({"none"}, False, True),
         "qwen2": ({"qkv"}, False, True), "qwen3": ({"none", "qkvo"}, True, True),
         "eurobert": ({"none", "qkvo"}, False, False)}
ENCODERS = {"llama": "LlamaModel", "mistral": "MistralModel", "qwen2": "Qwen2Model", "qwen3": "Qwen3Model",
            "eurobert": "EuroBertModel"}  # the bare bodies: what AutoModel builds


@dataclass(frozen=True)
class Target:
    """What an export writes: the format asked (`kind`, or sentence-transformers), the CLASSES kind whose config and
    weights it holds (`body`), its attention, and the transformers class saved (`cls`)."""
    kind: str
    body: str
    causal: bool
    cls: str


def family(cfg: ModelConfig) -> str:
    """The causal kind that holds this model's variants (what an imported model exports back as)."""
    if cfg.qk_norm:
        return "qwen3"
    if cfg.attention_bias == "qkv":
        return "qwen2"
    return "mistral" if cfg.sliding_window is not None and cfg.attention_bias == "none" else "llama"


def differences(cfg: ModelConfig, kind: str) -> list[str]:
    """The variants of this model that `kind`'s class cannot hold."""
    biases, qk_norm, window = HOLDS[kind]
    problems = []
    if cfg.attention_bias not in biases:
        problems.append(f"attention_bias={cfg.attention_bias!r}")
    if cfg.qk_norm != qk_norm:
        problems.append(f"qk_norm={cfg.qk_norm}")
    if cfg.sliding_window is not None and not window:
        problems.append(f"sliding_window={cfg.sliding_window}")
    return problems


def refusal(cfg: ModelConfig, kind: str, asked: str | None = None) -> str | None:
    """Why `kind` cannot hold this model exactly, naming a kind that can; None when it can. `asked`: the export the
    user named when it is not `kind` itself (sentence-transformers holds a body of some kind)."""
    problems = differences(cfg, kind)
    if not problems:
        return None
    other = family(cfg)
    if differences(cfg, other):  # e.g. q/k norms with Qwen2's biases: no class has both
        hint = "no export kind holds this combination"
    elif kind == "eurobert":  # the user asked for an encoder: name ones that hold the model
        hint = (f"export it {option('as', other)} (bidirectional {ENCODERS[other]}) or "
                f"{option('as', 'sentence-transformers')}")
    else:
        hint = f"export it {option('as', other)}"
    return f"{option('as', asked or kind)} cannot hold this model's {', '.join(problems)}: {hint}"


def hf_config_kwargs(cfg: ModelConfig) -> dict:
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        rope = {**cfg.rope_scaling.model_dump(), "rope_theta": cfg.rope_theta}
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": rope,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "hidden_act": "silu",
        "attention_bias": cfg.attention_bias == "qkvo",
        "mlp_bias": False,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
    }


def window_kwargs(cfg: ModelConfig, kind: str) -> dict:
    """The sliding window as each class spells it: Mistral's plain field; Qwen's, on every layer."""
    if kind == "mistral":
        return {"sliding_window": cfg.sliding_window}
    if kind in ("qwen2", "qwen3"):
        layer = "full_attention" if cfg.sliding_window is None else "sliding_attention"
        return {"use_sliding_window": cfg.sliding_window is not None, "sliding_window": cfg.sliding_window,
                "max_window_layers": 0, "layer_types": [layer] * cfg.num_hidden_layers}
    return {}


def hf_config(cfg: ModelConfig, kind: HFKind, *, causal: bool = True):
    """The transformers config of `kind` with our architecture (check `refusal` first); `causal=False`: a decoder
    family as a bidirectional encoder (no KV cache: it is not for generation)."""
    import transformers

    extra = window_kwargs(cfg, kind)
    if kind == "eurobert":
        extra["mask_token_id"] = cfg.mask_token_id if cfg.mask_token_id is not None else cfg.vocab_size - 1
        extra["classifier_pooling"] = "mean"  # AutoModelForSequenceClassification pools as encoderlab's heads do
    elif not causal:
        extra.update(is_causal=False, use_cache=False)
    return getattr(transformers, CLASSES[kind][0])(**hf_config_kwargs(cfg), **extra)
