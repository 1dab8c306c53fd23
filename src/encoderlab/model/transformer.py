"""The backbone: one pre-norm RMSNorm / RoPE / SwiGLU / grouped-query-attention transformer for MLM and CLM.

Causality is an argument of `forward`, never a class (docs/architecture.md, convention 1). Parameter names are those of
Hugging Face `LlamaModel` / `LlamaForCausalLM` and `EuroBertModel` / `EuroBertForMaskedLM`, so state dicts
move between encoderlab and transformers unchanged:

    model.embed_tokens.weight
    model.layers.{i}.input_layernorm.weight
    model.layers.{i}.self_attn.{q,k,v,o}_proj.weight     (+ .bias with attention_bias: Qwen2's q/k/v, or all four)
    model.layers.{i}.self_attn.{q,k}_norm.weight         (with qk_norm: Qwen3)
    model.layers.{i}.post_attention_layernorm.weight
    model.layers.{i}.mlp.{gate,up,down}_proj.weight
    model.norm.weight
    lm_head.weight

EuroBERT's MLM head (`EuroBertForMaskedLM`, checked in transformers 5.23) is a single bias-free `lm_head`
Linear on the final RMSNorm output, exactly Llama's causal head: no dense/activation/norm "prediction head" as
in BERT or ModernBERT. So one `TransformerLM` serves both objectives and the mapping is the identity. Neither
HF class stores rotary buffers in its state dict (non-persistent `inv_freq`), and neither do we: the angles
are recomputed per call. EuroBERT gives its embedding a `padding_idx`; that only affects HF's initialisation
and gradient of that row, not the forward, so it is not reproduced here.

Attention is computed by the backend the caller gives the model (`model/attention.py`: dense SDPA in the
form the caller chose, document-sparse varlen on CPU or flex on CUDA). It lays the batch out once per forward (a
mask, a document layout) and every layer calls that layout; the model itself never picks a kernel.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.model.attention import Backend, for_inference
from encoderlab.model.config import ModelConfig, RopeScaling
from encoderlab.model.lm_loss import fused_linear_cross_entropy


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        # Statistics in fp32 even under bf16, then back to the input dtype before the gain (as HF Llama does).
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


# ---- rotary position embedding -----------------------------------------------------------------------------


def rope_cos_sin(position_ids: Tensor, head_dim: int, theta: float,
                 scaling: RopeScaling | None = None) -> tuple[Tensor, Tensor]:
    """fp32 cos and sin of the rotary angles, (B or 1, T, head_dim); HF layout: the frequencies twice."""
    exponent = torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponent)  # (head_dim/2,)
    if scaling is not None:
        inv_freq = llama3_frequencies(inv_freq, scaling)
    angles = position_ids[..., None].float() * inv_freq  # (B, T, head_dim/2), fp32 for long contexts
    emb = torch.cat((angles, angles), dim=-1)  # (B, T, head_dim)
    return emb.cos(), emb.sin()


def llama3_frequencies(inv_freq: Tensor, s: RopeScaling) -> Tensor:
    """Llama 3.1's rescaled frequencies (transformers `_compute_llama3_parameters`, same operations in the same
    order so that fp32 results are bit-equal): wavelengths beyond the original context / low_freq_factor are slowed
    by `factor`, those under context / high_freq_factor kept, and those between interpolated smoothly."""
    context = s.original_max_position_embeddings
    low_freq_wavelen, high_freq_wavelen = context / s.low_freq_factor, context / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` (B, T, H, D) by angles cos/sin (B, T, D): the rotate-half convention of HF Llama."""
    # In x's dtype, so that q and k stay bf16 under autocast (fp32 angles would promote them).
    cos, sin = cos.to(x.dtype).unsqueeze(2), sin.to(x.dtype).unsqueeze(2)  # (B, T, 1, D) over heads
    return x * cos + _rotate_half(x) * sin


# ---- masks and positions -----------------------------------------------------------------------------------


def positions_from_doc_ids(doc_ids: Tensor) -> Tensor:
    """Position of each token inside its document, (B, T): 0 at every document start.

    A document starts where the id differs from the previous token's id (and at t = 0). Each token's position
    is its index minus the index of the last start at or before it (a running max), with no Python loop.
    """
    B, T = doc_ids.shape
    idx = torch.arange(T, device=doc_ids.device).expand(B, T)  # (B, T)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    last_start = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=1).values  # (B, T)
    return idx - last_start


# ---- blocks ------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_size
        h, qkv_bias = cfg.hidden_size, cfg.attention_bias != "none"
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=cfg.attention_bias == "qkvo")
        if cfg.qk_norm:  # Qwen3: over each head's D features, so the norm sees (B, T, H, D) as it is
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    # No forward: the block calls the two halves around the run's attention backend (`Block.forward`), so that
    # compile on CPU can take each half and leave the backend's varying layout eager.
    def qkv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, T, H, D) and k (B, T, Hkv, D) rotated, v (B, T, Hkv, D): what the attention backend takes."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)  # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)  # (B, T, Hkv, D)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)  # (B, T, Hkv, D)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, y: Tensor) -> Tensor:
        """The output projection of the backend's (B, T, H, D) result."""
        B, T = y.shape[:2]
        return self.o_proj(y.reshape(B, T, self.n_heads * self.head_dim))  # (B, T, C)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: Callable[..., Tensor]) -> Tensor:
        return self.after_attention(x, attend(*self.before_attention(x, cos, sin)))

    def before_attention(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.self_attn.qkv(self.input_layernorm(x), cos, sin)

    def after_attention(self, x: Tensor, y: Tensor) -> Tensor:
        x = x + self.self_attn.out(y)
        return x + self.mlp(self.post_attention_layernorm(x))


# ---- models ------------------------------------------------------------------------------------------------


def _init_module(module: nn.Module, std: float, generator: torch.Generator | None) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std, generator=generator)
            if getattr(m, "bias", None) is not None:  # the attention_bias variants: zero, as transformers does
                nn.init.zeros_(m.bias)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)


def _generator(module: nn.Module, seed: int | None) -> torch.Generator | None:
    device = next(module.parameters()).device
    if seed is None or device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(seed)


class Transformer(nn.Module):
    """Embedding, blocks, final RMSNorm: `LlamaModel` / `EuroBertModel` with a per-call `causal` flag."""

    def __init__(self, cfg: ModelConfig, attention: Backend | None = None) -> None:
        super().__init__()
        self.config = cfg
        # How every layer attends, chosen once per run (model/attention.py) by the trainer or the fine-tuner;
        # without one, the forward-only choice (inference, parity tests).
        self.attention = attention or for_inference()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.init_weights()

    def init_weights(self, seed: int | None = None) -> None:
        """normal(0, initializer_range) for embeddings and linears, ones for norms; also after to_empty()."""
        with torch.no_grad():
            _init_module(self, self.config.initializer_range, _generator(self, seed))

    def forward(
        self,
        input_ids: Tensor,
        *,
        causal: bool,
        doc_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Final-normed hidden states (B, T, C).

        input_ids (B, T). causal: CLM (True) or bidirectional MLM / fine-tuning (False) attention.
        doc_ids (B, T): document id of each token of a packed window; attention never crosses documents and,
        unless `position_ids` is given, positions restart at 0 at each document start.
        attention_mask (B, T): 1 for tokens, 0 for padding. Positions default to 0..T-1 as in transformers
        (pass `position_ids` for left padding if the positions should start at the first real token).
        """
        T = input_ids.shape[1]
        for name, given in (("doc_ids", doc_ids), ("attention_mask", attention_mask)):
            if given is not None and given.shape != input_ids.shape:
                raise ValueError(f"{name} has shape {tuple(given.shape)}, input_ids {tuple(input_ids.shape)}")
        if position_ids is None:
            if doc_ids is not None:
                position_ids = positions_from_doc_ids(doc_ids)  # (B, T)
            else:
                position_ids = torch.arange(T, device=input_ids.device)[None]  # (1, T)
        window = self.config.sliding_window
        window = window if window is not None and window < T else None  # a window as long as T constrains nothing
        if window is not None and doc_ids is None and attention_mask is None:
            attention_mask = torch.ones_like(input_ids)  # the window is a mask: the layout takes its shape from this
        attend = self.attention.layout(causal, doc_ids, attention_mask, window)  # once per forward, for every layer

        x = self.embed_tokens(input_ids)  # (B, T, C)
        cfg = self.config
        cos, sin = rope_cos_sin(position_ids, cfg.head_size, cfg.rope_theta, cfg.rope_scaling)
        for layer in self.layers:
            x = layer(x, cos, sin, attend)
        return self.norm(x)


class TransformerLM(nn.Module):
    """`Transformer` + `lm_head`: `LlamaForCausalLM` (causal=True), `EuroBertForMaskedLM` (causal=False)."""

    def __init__(self, cfg: ModelConfig, attention: Backend | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = Transformer(cfg, attention)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        else:
            with torch.no_grad():
                _init_module(self.lm_head, cfg.initializer_range, None)  # the body initialised itself

    def init_weights(self, seed: int | None = None) -> None:
        """Re-initialise every weight (see `Transformer.init_weights`); with `seed`, reproducibly."""
        with torch.no_grad():
            _init_module(self, self.config.initializer_range, _generator(self, seed))

    def forward(
        self,
        input_ids: Tensor,
        *,
        causal: bool,
        doc_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_positions: Tensor | None = None,
        targets: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Logits (B, T, V), or (N, V) at `output_positions` only.

        output_positions: a bool mask (B, T) or a 1-D index into the flattened B*T positions. The vocabulary
        projection, the largest matmul of small models, then runs only where a loss is taken (MLM's masked
        tokens). The index form avoids the host sync that boolean indexing costs on GPU.
        targets (N,), with `output_positions`: return (summed cross-entropy, rows predicted right) instead of the
        logits, through the fused head + loss of `lm_loss` (no (N, V) logits kept for the backward).
        """
        hidden = self.model(
            input_ids,
            causal=causal,
            doc_ids=doc_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
        )  # (B, T, C)
        if output_positions is not None:
            hidden = gather_positions(hidden, output_positions)  # (N, C)
        if targets is not None:
            if output_positions is None:
                raise ValueError("targets need output_positions (the rows they belong to)")
            return fused_linear_cross_entropy(hidden, self.lm_head.weight, targets)
        return self.lm_head(hidden)


def gather_positions(hidden: Tensor, positions: Tensor) -> Tensor:
    """Rows of `hidden` (B, T, C) at a bool mask (B, T) or a flat index (N,) into B*T: (N, C)."""
    B, T, C = hidden.shape
    if positions.dtype == torch.bool:
        if positions.shape != (B, T):
            raise ValueError(f"output_positions mask has shape {tuple(positions.shape)}, expected {(B, T)}")
        return hidden[positions]
    if positions.dim() != 1:
        raise ValueError(f"output_positions index must be 1-D into the flattened B*T={B * T} positions")
    return hidden.reshape(B * T, C).index_select(0, positions)


def count_parameters(module: nn.Module) -> int:
    """Distinct parameters (a tied LM head is counted once); works on the meta device."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


__all__ = [
    "MLP",
    "Attention",
    "Block",
    "RMSNorm",
    "Transformer",
    "TransformerLM",
    "apply_rope",
    "count_parameters",
    "gather_positions",
    "positions_from_doc_ids",
    "rope_cos_sin",
]
