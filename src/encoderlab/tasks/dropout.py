"""Dropout whose mask is a pure function of a seed per batch row, the position and the channel.

Why not `nn.Dropout`: the batched engine (finetuning/batched.py) computes K runs' losses in one `vmap`, where
torch's random draws cannot come from each run's own generator, so its masks could never be the masks the
sequential engine draws for the same run, and the two engines' records would differ. Here the mask is hashed from
integers the batch carries (`dropout_seed`, one per row, derived from the run's data-order seed and the batch's
place in the epoch), so both engines, any device and any padding give a row the same mask. The distribution is
nn.Dropout's: each value kept with probability 1 - p and scaled by 1 / (1 - p).
"""
from __future__ import annotations

import torch
from torch import Tensor

from encoderlab.core.seeds import derive_seed

_M32 = 0xFFFFFFFF


def row_seeds(seed: int, batch_number: int, rows: int) -> Tensor:
    """The `dropout_seed` of a batch: one 32-bit seed per row, from the epoch's order seed and the batch's index."""
    return torch.tensor([derive_seed("dropout", seed, batch_number, r) & _M32 for r in range(rows)], dtype=torch.long)


def _mix(x: Tensor) -> Tensor:
    """A 32-bit integer hash (each step a bijection on [0, 2^32)); int64 tensors holding values below 2^32, and a
    multiplier below 2^31, so no product overflows."""
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def seeded_dropout(hidden: Tensor, seeds: Tensor, p: float) -> Tensor:
    """Dropout of `hidden` (B, T, C) with the mask of `seeds` (B,): value (b, t, c) kept iff
    hash(hash(hash(seeds[b]) ^ t) ^ c) >= p * 2^32."""
    if p <= 0:
        return hidden
    _, T, C = hidden.shape
    t = torch.arange(T, device=hidden.device).view(1, T, 1)
    c = torch.arange(C, device=hidden.device).view(1, 1, C)
    h = _mix(_mix(_mix(seeds.view(-1, 1, 1) & _M32) ^ t) ^ c)
    keep = h >= round(p * 2**32)
    return hidden * keep.to(hidden.dtype) * (1.0 / (1.0 - p))
