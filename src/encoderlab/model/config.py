"""The backbone's own config: shapes and numerics of the Llama / EuroBERT layout (PAPER.md, "Architecture").

Only what changes the weights or the maths lives here. Causality is not a field: it is an argument of every
forward call (DESIGN.md convention 1). Dropout and biases do not exist in this architecture, so they are not
options.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator


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

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        h, nh, nkv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if h % nh:
            raise ValueError(
                f"hidden_size={h} must be divisible by num_attention_heads={nh} "
                f"(allowed head counts for this width: {_divisors(h)})"
            )
        if nh % nkv:
            raise ValueError(
                f"num_attention_heads={nh} must be divisible by num_key_value_heads={nkv} "
                f"(allowed KV head counts: {_divisors(nh)})"
            )
        if (h // nh) % 2:
            raise ValueError(
                f"head_dim = hidden_size / num_attention_heads = {h // nh} must be even for rotary embeddings"
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id"):
            value = getattr(self, name)
            if value is not None and value >= self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary (vocab_size={self.vocab_size})")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ---- accounting ----------------------------------------------------------------------------------------

    def layer_parameters(self) -> int:
        """Parameters of one transformer block: q/k/v/o, gate/up/down and two RMSNorm weights."""
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        attention = 2 * h * h + 2 * h * kv  # q_proj, o_proj, k_proj, v_proj
        mlp = 3 * h * self.intermediate_size
        return attention + mlp + 2 * h

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
        n_matmul = self.num_hidden_layers * (self.layer_parameters() - 2 * self.hidden_size)
        ctx = (seq_len + 1) / 2 if causal else float(seq_len)
        d_attn = self.num_attention_heads * self.head_dim
        forward = (
            2 * n_matmul
            + 2 * self.hidden_size * self.vocab_size * head_fraction
            + 4 * self.num_hidden_layers * d_attn * ctx
        )
        return 3 * forward if training else forward


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
