"""The bridge to Hugging Face `transformers`: our parameter names are theirs, so models map by config alone.

`LlamaForCausalLM` is the causal twin of our `TransformerLM`, `EuroBertForMaskedLM` the bidirectional one; both load
our state dict with `strict=True`.
"""
from __future__ import annotations

from typing import Literal

from encoderlab.model.config import ModelConfig

HFKind = Literal["llama", "eurobert"]


def hf_config_kwargs(cfg: ModelConfig) -> dict:
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
    }


def hf_config(cfg: ModelConfig, kind: HFKind):
    """A `LlamaConfig` (causal) or `EuroBertConfig` (bidirectional) with our architecture."""
    from transformers import EuroBertConfig, LlamaConfig

    if kind == "llama":
        return LlamaConfig(**hf_config_kwargs(cfg))
    mask = cfg.mask_token_id if cfg.mask_token_id is not None else cfg.vocab_size - 1
    return EuroBertConfig(**hf_config_kwargs(cfg), mask_token_id=mask)
