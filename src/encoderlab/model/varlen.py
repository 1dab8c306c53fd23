"""Document-sparse attention on CPU: each packed document attends only to itself, in a few padded attention calls.

A packed window of several documents needs a block-diagonal mask. SDPA's CPU flash kernel does the full (T, T)
work whatever the mask (and whatever `is_causal`): measured at the mini shape, an explicit causal mask, `is_causal`
and no mask at all cost the same. FlashAttention's varlen kernels and flex_attention skip the masked blocks on GPU;
this module does the CPU equivalent. The documents of the batch are gathered into a few buckets of similar
length, each bucket runs one attention call (`sdpa_cpu`: the faster form for its length) over its own
(n, H, L, D) tensor with the causal flag (right padding inside a bucket needs no mask under causality) or a
key-padding mask, and the outputs are put back in place. The work falls from B * T^2 to about sum(L^2) over
documents: a third of it for documents of 128 tokens on average in 512-token windows (measured: 0.35).

`sdpa_cpu` is also the dense path's attention on CPU (model/transformer.py).

The plan (segments, buckets, gather and scatter indices) depends only on the document ids, so it is built once per
forward and shared by every layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

# Cost of one more SDPA call, in units of attention work (query x key pairs): with H=8, D=64 on 2 cores a call
# costs about as much as 128 x 128 pairs of work, so two buckets merge when padding them together is cheaper.
CALL_COST = 128 * 128
# Below this fraction of the dense work the gathers and extra calls pay for themselves (at mini, 0.35 of the work
# took 0.7-0.75 of the dense time: the backward kernels do not shrink in proportion).
WORTH_IT = 0.6


# Longest sequence for which attention written out as matrix products (transformers' "eager" attention) beats
# the CPU flash kernel forward + backward. Measured (bf16, padding mask, GQA 2:1), milliseconds flash / SDPA math /
# eager: 1 thread, batch 32, 4 heads: 20 / 11 / 4.8 at 48 tokens, 76 / 71 / 42 at 160, 121 / 192 / 149 at 256;
# 2 threads, batch 8, 8 heads: 28 / 27 / 17 at 192, 84 / 107 / 120 at 384. The flash backward recomputes the
# probabilities in blocks whose fixed cost dominates short sequences. Forward only, flash wins everywhere (SDPA
# math 1.7-3.7x slower), so the eager form is used only where a backward follows.
EAGER_MAX_LEN = 192


def sdpa_cpu(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    """Attention on CPU, (B, H, T, D) queries and (B, Hkv, T, D) keys/values, with the faster form for the length.

    The eager form is transformers' `eager_attention_forward`: scores and the product with the values in the input
    dtype, softmax in fp32 (in bf16 the output's relative error to an fp32 reference measured 4e-3, against 2e-3 for
    the flash kernel, whose scores stay fp32).
    """
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    if training and q.shape[-2] <= EAGER_MAX_LEN:
        return _eager_attention(q, k, v, mask, is_causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          enable_gqa=k.shape[1] != q.shape[1])  # the flash kernel on CPU


def _eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # repeat_kv's order: KV head j serves query heads j*groups .. (j+1)*groups - 1
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, T, T)
    if is_causal:
        T = q.shape[-2]
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))  # every row keeps a visible key (build_attention_mask)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype) @ v


@dataclass
class VarlenPlan:
    gather: Tensor  # (P,) flat B*T position of every bucket slot (padding slots repeat a slot's first position)
    scatter: Tensor  # (B*T,) slot in `gather` of every position
    buckets: list[tuple[int, int, Tensor | None]]  # (documents n, length L, key-padding mask (n, 1, 1, L) or None)
    work: float  # attention work of the buckets over the dense B * T^2
    causal: bool


def plan_segments(doc_ids: Tensor, causal: bool) -> VarlenPlan:
    """Segments = maximal runs of equal document id in each row; buckets chosen to minimise work + calls."""
    B, T = doc_ids.shape
    ids = doc_ids.cpu()
    starts = torch.ones(B, T, dtype=torch.bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    flat_starts = torch.nonzero(starts.reshape(-1)).flatten()  # rows start new segments too (t = 0 is a start)
    lengths = torch.diff(flat_starts, append=torch.tensor([B * T]))
    order = torch.argsort(lengths, descending=True, stable=True)
    seg_len, seg_start = lengths[order].tolist(), flat_starts[order].tolist()
    groups = _partition(seg_len)
    gather_parts, valid_parts, buckets, work = [], [], [], 0
    for lo, hi in groups:
        L, n = seg_len[lo], hi - lo
        offs = torch.arange(L)
        starts_b = torch.tensor(seg_start[lo:hi])[:, None]
        valid = offs[None, :] < torch.tensor(seg_len[lo:hi])[:, None]  # (n, L)
        gather_parts.append(torch.where(valid, starts_b + offs, starts_b).reshape(-1))
        valid_parts.append(valid.reshape(-1))
        buckets.append((n, L, None if bool(valid.all()) else valid[:, None, None, :]))
        work += n * L * L
    gather, valid_slots = torch.cat(gather_parts), torch.cat(valid_parts)
    slots = torch.arange(len(gather))
    scatter = torch.empty(B * T, dtype=torch.long)
    scatter[gather[valid_slots]] = slots[valid_slots]
    device = doc_ids.device
    buckets = [(n, L, m if m is None else m.to(device)) for n, L, m in buckets]
    return VarlenPlan(gather.to(device), scatter.to(device), buckets, work / (B * T * T), causal)


def _partition(lengths: list[int]) -> list[tuple[int, int]]:
    """Contiguous groups [lo, hi) of lengths sorted descending minimising sum(n * max^2) + CALL_COST per group."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n  # best[i]: cost of the first i segments
    cut = [0] * (n + 1)
    for hi in range(1, n + 1):
        for lo in range(hi - 1, -1, -1):
            cost = best[lo] + (hi - lo) * lengths[lo] ** 2 + CALL_COST
            if cost < best[hi]:
                best[hi], cut[hi] = cost, lo
            if (hi - lo) * lengths[lo] ** 2 > best[hi]:  # longer groups only cost more from here on
                break
    groups, hi = [], n
    while hi > 0:
        groups.append((cut[hi], hi))
        hi = cut[hi]
    return groups[::-1]


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, plan: VarlenPlan) -> Tensor:
    """q (B, T, H, D), k and v (B, T, Hkv, D) -> (B, T, H, D), attention inside each planned segment only."""
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    qs = q.reshape(B * T, H, D).index_select(0, plan.gather)  # (P, H, D)
    ks = k.reshape(B * T, Hkv, D).index_select(0, plan.gather)
    vs = v.reshape(B * T, Hkv, D).index_select(0, plan.gather)
    outs, at = [], 0
    for n, L, pad_mask in plan.buckets:
        part = slice(at, at + n * L)
        at += n * L
        qb, kb, vb = (x[part].view(n, L, -1, D).transpose(1, 2) for x in (qs, ks, vs))  # (n, heads, L, D)
        # Causal: a real query never sees the right padding after it, so the flag alone is exact for real tokens.
        y = sdpa_cpu(qb, kb, vb, None if plan.causal else pad_mask, plan.causal)
        outs.append(y.transpose(1, 2).reshape(n * L, H, D))
    return torch.cat(outs).index_select(0, plan.scatter).view(B, T, H, D)
