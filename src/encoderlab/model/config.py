"""The backbone's own config: shapes and numerics of the Llama / EuroBERT layout (docs/paper.md#architecture).

Only what changes the weights or the maths lives here. Causality is not a field: it is an argument of every
forward call (docs/architecture.md, convention 1). Dropout does not exist in this architecture, so it is not an option.

The variants of imported decoders (Llama 3.x, Mistral, Qwen2, Qwen3) are fields of the one backbone, all off for
the paper's models: `attention_bias`, `qk_norm`, `head_dim`, `rope_scaling`, `sliding_window` (`VARIANTS`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_serializer, model_validator


class RopeScaling(BaseModel):
    """Llama 3.1's rotary scaling (transformers' `llama3` rope_type): long wavelengths slowed by `factor`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rope_type: Literal["llama3"] = "llama3"
    factor: PositiveFloat
    low_freq_factor: PositiveFloat
    high_freq_factor: PositiveFloat
    original_max_position_embeddings: PositiveInt

    @model_validator(mode="after")
    def _check_factors(self) -> RopeScaling:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"rope_scaling: high_freq_factor={self.high_freq_factor} must exceed "
                             f"low_freq_factor={self.low_freq_factor}")
        return self


# Off values of the decoder variants. A field at its off value is left out of `model_dump`: a model_config.json lists
# only the variants its model uses, so one of any checkpoint format (runs/migrate_checkpoint.py) reads the same, a
# missing variant being off, and a model without variants is described by the same fields as the paper's.
VARIANTS = {"attention_bias": "none", "qk_norm": False, "head_dim": None, "rope_scaling": None,
            "sliding_window": None}


class ModelConfig(BaseModel):
    """Shapes of a pre-norm RMSNorm / RoPE / SwiGLU / GQA transformer with Hugging Face parameter names."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    vocab_size: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    max_position_embeddings: PositiveInt = 2048
    rope_theta: PositiveFloat = 10000.0
    rms_norm_eps: PositiveFloat = 1e-5
    tie_word_embeddings: bool = False
    initializer_range: PositiveFloat = 0.02
    pad_token_id: int | None = Field(default=None, ge=0)
    bos_token_id: int | None = Field(default=None, ge=0)
    eos_token_id: int | None = Field(default=None, ge=0)
    mask_token_id: int | None = Field(default=None, ge=0)
    # Biases of the attention projections: "qkv" (Qwen2: q/k/v only), "qkvo" (Llama/Qwen3 attention_bias=True).
    attention_bias: Literal["none", "qkv", "qkvo"] = "none"
    qk_norm: bool = False  # Qwen3: per-head RMSNorm of queries and keys (q_norm, k_norm), before RoPE
    head_dim: PositiveInt | None = None  # None: hidden_size / num_attention_heads (set for Qwen3, Mistral-Nemo)
    rope_scaling: RopeScaling | None = None
    # Keys a query sees: causal, the last `sliding_window` (itself included); bidirectional, those at most
    # `sliding_window` away on either side (transformers' Mistral masks, causal and with is_causal=False).
    sliding_window: PositiveInt | None = None

    @model_serializer(mode="wrap")
    def _omit_off_variants(self, handler) -> dict:
        data = handler(self)
        return {k: v for k, v in data.items() if k not in VARIANTS or v != VARIANTS[k]}

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        h, nh, nkv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if h % nh and self.head_dim is None:
            raise ValueError(
                f"hidden_size={h} must be divisible by num_attention_heads={nh} "
                f"(allowed head counts for this width: {_divisors(h)})"
            )
        if nh % nkv:
            raise ValueError(
                f"num_attention_heads={nh} must be divisible by num_key_value_heads={nkv} "
                f"(allowed KV head counts: {_divisors(nh)})"
            )
        if self.head_size % 2 and self.head_dim is not None:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if self.head_size % 2:  # each field named `key=value`, as the config's blame reads a message across keys
            even = [n for n in _divisors(h) if (h // n) % 2 == 0]
            raise ValueError(f"hidden_size={h} / num_attention_heads={nh} makes heads {self.head_size} wide, which "
                             f"must be even for rotary embeddings (head counts that give even heads at this width: "
                             f"{even}; or set head_dim)")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id"):
            value = getattr(self, name)
            if value is not None and value >= self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary (vocab_size={self.vocab_size})")
        return self

    @property
    def head_size(self) -> int:
        """Width of one attention head: `head_dim`, or hidden_size / num_attention_heads when it is not set."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    # ---- accounting ----------------------------------------------------------------------------------------

    def layer_matmul_parameters(self) -> int:
        """Weights of one block's matrix products: q/k/v/o and gate/up/down."""
        h, q = self.hidden_size, self.num_attention_heads * self.head_size
        kv = self.num_key_value_heads * self.head_size
        return 2 * h * q + 2 * h * kv + 3 * h * self.intermediate_size  # q_proj, o_proj, k_proj, v_proj, MLP

    def layer_parameters(self) -> int:
        """Parameters of one transformer block: its matrices, two RMSNorm weights, and the variants' biases and
        q/k norms."""
        q, kv = self.num_attention_heads * self.head_size, self.num_key_value_heads * self.head_size
        biases = {"none": 0, "qkv": q + 2 * kv, "qkvo": q + 2 * kv + self.hidden_size}[self.attention_bias]
        qk_norms = 2 * self.head_size if self.qk_norm else 0
        return self.layer_matmul_parameters() + 2 * self.hidden_size + biases + qk_norms

    def num_parameters(self, include_embeddings: bool = True) -> int:
        """Parameter count of `TransformerLM` built from this config.

        `include_embeddings=False` leaves out the input embedding and the LM head (the vocabulary-sized
        matrices), the usual "non-embedding" count of scaling-law papers. A tied LM head is counted once.
        """
        body = self.num_hidden_layers * self.layer_parameters() + self.hidden_size  # + final norm
        if not include_embeddings:
            return body
        vocab_matrices = 1 if self.tie_word_embeddings else 2
        return body + vocab_matrices * self.vocab_size * self.hidden_size

    def flops_per_token(
        self, seq_len: int, causal: bool, *, training: bool = True, head_fraction: float = 1.0
    ) -> float:
        """Model FLOPs per input token (a multiply-add is 2 FLOPs), as MFU and the study's FLOPs axis use.

        forward = 2 * N_matmul                        every weight matrix of the blocks, once per token
                + 2 * H * V * head_fraction           LM head, applied only at a fraction of positions (MLM's
                                                      sparse head: the masking rate; CLM: 1.0)
                + 4 * L * d_attn * ctx                QK^T and AV; d_attn = heads * head_dim
        ctx     = seq_len for bidirectional attention, (seq_len + 1) / 2 on average for causal attention
        total   = 3 * forward when `training` (backward costs twice the forward), else forward.

        The embedding lookup costs no FLOPs; norms, SiLU, RoPE and softmax are elementwise and left out.
        Document masks are ignored: attention counts the whole window (its lower triangle when causal),
        as fused kernels compute it. With head_fraction=1 and no attention term this is the familiar 6N.
        """
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if not 0.0 <= head_fraction <= 1.0:
            raise ValueError(f"head_fraction must be in [0, 1], got {head_fraction}")
        n_matmul = self.num_hidden_layers * self.layer_matmul_parameters()
        ctx = (seq_len + 1) / 2 if causal else float(seq_len)
        d_attn = self.num_attention_heads * self.head_size
        forward = (
            2 * n_matmul
            + 2 * self.hidden_size * self.vocab_size * head_fraction
            + 4 * self.num_hidden_layers * d_attn * ctx
        )
        return 3 * forward if training else forward


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
