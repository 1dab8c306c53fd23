"""Attention backends: how the layers compute softmax(q k^T / sqrt(D)) v, and the one place that chooses them.

Every choice of a backend or a kernel is made here, once per run: `for_pretraining` (the `train.attention` config key),
`for_finetuning` (a fine-tuning run's training steps and scoring alike), `for_batched` (the kernel the batched
engine's vmap needs), and inside `Varlen` the form of each length bucket (`form_for`). The trainer and the fine-tuner
give the chosen backend to the model, which only calls it: once per forward
`backend.layout(causal, doc_ids, attention_mask, window)` lays the batch out, and every layer calls that layout with
its q (B, T, H, D), k and v (B, T, Hkv, D). No kernel is picked by device, length or whether gradients are on
(docs/architecture.md, convention 5), so a run's training steps and its scoring share their numerics.

- `Dense(form)`: a dense boolean mask (documents, causality, padding), or none (SDPA's own causal flag) without
  documents and padding. Forms: "eager" (transformers' `eager_attention_forward`), "flash" (SDPA given the KV
  heads as they are: the flash kernel on CPU), "repeat-kv" (KV heads repeated first: CUDA's memory-efficient
  kernel, the one that takes a mask, has no GQA). `form_for` picks the form measured fastest for the device and
  length.
- `Varlen(dense)`: packed documents on CPU, each attending to itself in a few length buckets.
- `Flex(kernel, dense)`: packed documents on CUDA through the block-sparse `flex_attention`.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from encoderlab.core.errors import EncoderlabError

FORMS = ("eager", "flash", "repeat-kv")

# Longest sequence for which attention written out as matrix products (transformers' "eager" attention) beats
# the CPU flash kernel forward + backward. Measured (bf16, padding mask, GQA 2:1), milliseconds flash / SDPA math /
# eager: 1 thread, batch 32, 4 heads: 20 / 11 / 4.8 at 48 tokens, 76 / 71 / 42 at 160, 121 / 192 / 149 at 256;
# 2 threads, batch 8, 8 heads: 28 / 27 / 17 at 192, 84 / 107 / 120 at 384. The flash backward recomputes the
# probabilities in blocks whose fixed cost dominates short sequences. Forward only, flash wins everywhere (SDPA
# math 1.7-3.7x slower): a run that only scores should ask for "flash".
EAGER_MAX_LEN = 192


def attend(form: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    """q (B, H, T, D), k and v (B, Hkv, T, D) -> (B, H, T, D). The eager form keeps the scores in the input dtype
    (bf16 output error to fp32 measured 4e-3; 2e-3 for the flash kernel, whose scores stay fp32), softmax in fp32."""
    groups = q.shape[1] // k.shape[1]
    if form == "flash":  # the kernel reads each KV head for its query heads itself (15% faster than copies)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=groups > 1)
    if groups > 1:  # repeat_kv's order: KV head j serves query heads j*groups .. (j+1)*groups - 1
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, T, D)
    if form == "repeat-kv":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, T, T)
    if is_causal:
        T = q.shape[-2]
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))  # every row keeps a visible key (build_attention_mask)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype) @ v


def build_attention_mask(causal: bool, doc_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                         window: int | None = None) -> Tensor | None:
    """Boolean SDPA mask (B, 1, T, T), True = may attend; None when SDPA's causal flag or no mask suffices.

    - `doc_ids` (B, T): a query sees only keys of its own document (block-diagonal; block-causal if `causal`).
    - `attention_mask` (B, T), 1 = token, 0 = padding (HF style): padding keys are hidden from every query.
    - `window` (ModelConfig.sliding_window): causal, a query sees the last `window` keys (itself included);
      bidirectional, the keys at most `window` away. It constrains nothing in sequences of `window` tokens or less.
    A query row left with no visible key (a padding query before any real token under causal attention, or a
    row of padding only) is allowed to see itself: its output is meaningless but finite, never NaN.
    """
    if doc_ids is None and attention_mask is None:  # Transformer.forward gives a window an attention_mask
        return None
    ref = doc_ids if doc_ids is not None else attention_mask
    assert ref is not None
    B, T = ref.shape
    device = ref.device
    if doc_ids is not None:
        allowed = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, T, T) query x key
    else:
        allowed = torch.ones(B, T, T, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if window is not None:
        distance = torch.arange(T, device=device)[:, None] - torch.arange(T, device=device)[None, :]  # q - k
        allowed = allowed & (distance < window if causal else distance.abs() <= window)
    if attention_mask is not None:
        if attention_mask.shape != (B, T):
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(B, T)}")
        allowed = allowed & attention_mask.bool()[:, None, :]  # hide padding keys
    eye = torch.eye(T, dtype=torch.bool, device=device)
    allowed = allowed | (eye & ~allowed.any(dim=-1, keepdim=True))  # empty rows see themselves
    return allowed[:, None]  # (B, 1, T, T), broadcast over heads


# ---- dense -------------------------------------------------------------------------------------------------


@dataclass
class DenseLayout:
    form: str
    mask: Tensor | None  # (B, 1, T, T), or None: no mask at all (SDPA's fused causal or unmasked kernels)
    is_causal: bool

    def __call__(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, T, H, D), (B, T, Hkv, D) -> (B, T, H, D)
        y = attend(self.form, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.mask, self.is_causal)
        return y.transpose(1, 2)


@dataclass(frozen=True)
class Dense:
    form: str = "flash"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"attention form must be one of {FORMS}, not {self.form!r}")

    def layout(self, causal: bool, doc_ids: Tensor | None, attention_mask: Tensor | None,
             window: int | None = None) -> DenseLayout:
        mask = build_attention_mask(causal, doc_ids, attention_mask, window)
        return DenseLayout(self.form, mask, causal and mask is None)


# ---- varlen: document-sparse attention on CPU --------------------------------------------------------------
#
# SDPA's CPU kernels do the full (T, T) work whatever the mask (measured: an explicit causal mask, `is_causal` and
# no mask cost the same). Here the documents of a batch are gathered into a few buckets of similar length, each
# bucket runs one call over its own (n, H, L, D) tensor with the causal flag or a key-padding mask, and the outputs
# are put back: the work falls from B * T^2 to about sum(L^2), 0.35 of it for 128-token documents in 512 tokens.

# Cost of one more SDPA call, in units of attention work (query x key pairs): with H=8, D=64 on 2 cores a call
# costs about as much as 128 x 128 pairs of work, so two buckets merge when padding them together is cheaper.
CALL_COST = 128 * 128
# Below this fraction of the dense work the gathers and extra calls pay for themselves (at mini, 0.35 of the work
# took 0.7-0.75 of the dense time: the backward kernels do not shrink in proportion).
WORTH_IT = 0.6


@dataclass
class VarlenLayout:
    gather: Tensor  # (P,) flat B*T position of every bucket slot (padding slots repeat a slot's first position)
    scatter: Tensor  # (B*T,) slot in `gather` of every position
    buckets: list[tuple[int, int, Tensor | None]]  # (documents n, length L, key-padding mask (n, 1, 1, L) or None)
    work: float  # attention work of the buckets over the dense B * T^2
    causal: bool

    def __call__(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q (B, T, H, D), k and v (B, T, Hkv, D) -> (B, T, H, D), attention inside each segment of the layout only."""
        B, T, H, D = q.shape
        Hkv = k.shape[2]
        qs = q.reshape(B * T, H, D).index_select(0, self.gather)  # (P, H, D)
        ks = k.reshape(B * T, Hkv, D).index_select(0, self.gather)
        vs = v.reshape(B * T, Hkv, D).index_select(0, self.gather)
        # One split per tensor, not a slice per bucket: a slice's backward writes a zero tensor of the whole (P, H, D)
        # and adds it to the others' (measured 20% of a micro MLM step); split's backward is one concatenation.
        sizes = [n * L for n, L, _ in self.buckets]
        outs = []
        for (n, L, pad_mask), *parts in zip(self.buckets, qs.split(sizes), ks.split(sizes), vs.split(sizes)):
            qb, kb, vb = (x.view(n, L, -1, D).transpose(1, 2) for x in parts)  # (n, heads, L, D)
            # Each bucket has its own length, so its own fastest form (EAGER_MAX_LEN). Causal: a real query never
            # sees the right padding after it, so the flag alone is exact for real tokens.
            form = form_for("cpu", L)
            y = attend(form, qb, kb, vb, None if self.causal else pad_mask, self.causal)
            outs.append(y.transpose(1, 2).reshape(n * L, H, D))
        return torch.cat(outs).index_select(0, self.scatter).view(B, T, H, D)


def segment_layout(doc_ids: Tensor, causal: bool) -> VarlenLayout:
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
    return VarlenLayout(gather.to(device), scatter.to(device), buckets, work / (B * T * T), causal)


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


@dataclass(frozen=True)
class Varlen:
    dense: Dense  # padded batches, single documents, and (with `fallback`) batches the buckets barely shrink
    fallback: bool = True  # the dense path where the buckets keep WORTH_IT or more of the dense work

    def layout(self, causal: bool, doc_ids: Tensor | None, attention_mask: Tensor | None,
             window: int | None = None) -> VarlenLayout | DenseLayout:
        # A sliding window (imported Mistral) takes the dense mask: the buckets hold whole documents, unwindowed.
        segmented = doc_ids is not None and attention_mask is None and window is None
        layout = segment_layout(doc_ids, causal) if segmented else None
        if layout is None or (self.fallback and layout.work >= WORTH_IT):  # long documents: the dense kernel is as fast
            return self.dense.layout(causal, doc_ids, attention_mask, window)
        return layout


# ---- flex: document masks on CUDA --------------------------------------------------------------------------
#
# SDPA's CUDA kernels take no arbitrary mask (flash) or compute every block of one (memory-efficient); flex_attention
# with a BlockMask computes only the blocks a document spans. Its fused kernel comes from compiling it, which the
# model never does: the trainer passes the compiled function in (without it: the slow eager reference, for tests).


@dataclass
class FlexLayout:
    block_mask: object  # torch.nn.attention.flex_attention.BlockMask
    kernel: Callable

    def __call__(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, T, H, D), (B, T, Hkv, D) -> (B, T, H, D)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H or Hkv, T, D)
        y = self.kernel(q, k, v, block_mask=self.block_mask, enable_gqa=k.shape[1] != q.shape[1])
        return y.transpose(1, 2)


@dataclass(frozen=True)
class Flex:
    kernel: Callable | None = None  # the compiled flex_attention; None: its eager reference
    dense: Dense = field(default_factory=lambda: Dense("repeat-kv"))  # padded batches, no documents

    def layout(self, causal: bool, doc_ids: Tensor | None, attention_mask: Tensor | None,
             window: int | None = None) -> FlexLayout | DenseLayout:
        if doc_ids is None or attention_mask is not None:
            return self.dense.layout(causal, doc_ids, attention_mask, window)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, T = doc_ids.shape

        def same_document(b, h, q, kv):  # a query sees its own document (and only earlier keys if causal)
            allowed = doc_ids[b, q] == doc_ids[b, kv]
            if window is not None:  # as build_attention_mask's window
                allowed = allowed & ((q - kv < window) if causal else ((q - kv).abs() <= window))
            return allowed & (q >= kv) if causal else allowed

        if window is None and T % FLEX_BLOCK == 0:
            block_mask = document_block_mask(doc_ids, causal, same_document)
        else:
            block_mask = create_block_mask(same_document, B, None, T, T, device=doc_ids.device)
        return FlexLayout(block_mask, self.kernel or flex_attention)


FLEX_BLOCK = 128  # flex_attention's default tile, rows and columns


def document_block_mask(doc_ids: Tensor, causal: bool, mask_mod: Callable):
    """The BlockMask `create_block_mask(mask_mod, B, None, T, T)` makes for document masks, from each tile's smallest
    and largest document id: (B, T/128, T/128) work instead of evaluating mask_mod on all B x T x T pairs, and no
    host sync (on an H100 that evaluation took 7.9 ms at 8 x 2,048 tokens, 135 ms on its first call). A tile pair
    whose id ranges do not overlap holds no allowed pair; one whose tiles are a single, shared document is full
    (below the diagonal when causal); any other overlapping pair is partial and mask_mod decides inside it. For
    packed windows (ids that never decrease) these are exactly create_block_mask's tiles; ids in another order only
    make more tiles partial."""
    from torch.nn.attention.flex_attention import BlockMask

    B, T = doc_ids.shape
    tiles = doc_ids.reshape(B, T // FLEX_BLOCK, FLEX_BLOCK)
    low, high = tiles.amin(-1), tiles.amax(-1)  # (B, n)
    overlap = (low[:, :, None] <= high[:, None, :]) & (low[:, None, :] <= high[:, :, None])  # (B, q tile, kv tile)
    single = low == high
    full = overlap & single[:, :, None] & single[:, None, :]
    if causal:
        q_tile = torch.arange(T // FLEX_BLOCK, device=doc_ids.device)
        overlap = overlap & (q_tile[:, None] >= q_tile[None, :])
        full = full & (q_tile[:, None] > q_tile[None, :])
    partial = overlap & ~full

    def listed(tiles_on: Tensor) -> tuple[Tensor, Tensor]:  # per q tile: how many kv tiles, and which first
        order = torch.sort(tiles_on.to(torch.int8), dim=-1, descending=True, stable=True).indices
        return tiles_on.sum(-1, dtype=torch.int32)[:, None], order.to(torch.int32)[:, None]

    return BlockMask.from_kv_blocks(*listed(partial), *listed(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(T, T))


Backend = Dense | Varlen | Flex


# ------------------------------------------------------------------------------------------------ the choice


def form_for(device_type: str, length: int) -> str:
    """The dense form measured fastest to train on up to `length` tokens (EAGER_MAX_LEN) on a device of this type."""
    if device_type != "cpu":
        return "repeat-kv"
    return "eager" if length <= EAGER_MAX_LEN else "flash"


def for_inference() -> Dense:
    """A model that only computes forwards (inference, parity tests): the flash kernel, fastest without a backward
    (EAGER_MAX_LEN's measurements)."""
    return Dense("flash")


def for_finetuning(device: torch.device, length: int) -> Dense:
    """A fine-tuning run's backend, for its training steps and its scoring alike (one numerics per run): the form
    measured fastest under a backward at the run's longest input."""
    return Dense(form_for(device.type, length))


def for_pretraining(kind: str, device: torch.device, seq_len: int,
                    fuse: Callable[[Callable], Callable] = lambda kernel: kernel) -> Backend:
    """A pretraining run's backend (`train.attention`), chosen once and given to the model. auto, as measured: flex on
    CUDA, varlen on a CPU where it saves work, compiled or not (`train.compile` on CPU compiles around the
    attention: pretraining/distributed.py `compiles_around_attention`). `fuse` makes flex_attention's
    fused kernel: the trainer's compiler (pretraining/distributed.py `compile_kernel`; the model's code stays out of
    compilation)."""
    dense = Dense(form_for(device.type, seq_len))  # every window has seq_len tokens
    if kind == "auto":
        if device.type == "cpu":
            return Varlen(dense, fallback=True)
        kind = "flex" if device.type == "cuda" else "dense"
    check(kind, device)
    if kind == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        return Flex(fuse(flex_attention), dense)
    if kind == "varlen":
        return Varlen(dense, fallback=False)
    return dense


def check(kind: str, device: torch.device) -> None:
    """A backend the device cannot run (`train.attention`), refused before any work (also by --dry-run)."""
    if kind == "flex" and device.type != "cuda":
        raise EncoderlabError(f"train.attention: flex needs a CUDA device (flex_attention has no backward on "
                              f"{device.type}); use auto, dense or varlen")
    if kind == "varlen" and device.type != "cpu":
        raise EncoderlabError(f"train.attention: varlen is the CPU path; on {device.type} use auto or flex")


def for_batched(device: torch.device) -> AbstractContextManager:
    """The kernel the batched fine-tuning engine runs under: SDPA's fused CPU kernel has no vmap rule (vmap would
    loop over the K runs); its math form batches, and measured faster there. CUDA's fused kernels have vmap rules
    and keep their memory savings."""
    if device.type == "cpu":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)
    return nullcontext()
