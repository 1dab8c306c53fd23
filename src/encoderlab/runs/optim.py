"""The parts of a training step that pretraining and fine-tuning share: AdamW, its LR, clipping, bf16 autocast."""
from __future__ import annotations

import math
import platform
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch


class AdamWSettings(Protocol):
    """What AdamW reads from a config section (pretraining's `optim`, the evaluation protocol's `optim`)."""

    betas: tuple[float, float]
    eps: float
    weight_decay: float


def build_adamw(params: Iterable[torch.Tensor], settings: AdamWSettings, lr: float,
                decay_all: bool = False) -> torch.optim.AdamW:
    """AdamW over two groups, decayed matrices then the rest, each in the order given. Norm gains are decayed only
    with `decay_all` (as the authors' Optimus does); by default not (decaying them shrinks the residual stream for
    no regularisation benefit)."""
    params = list(params)
    rest_decay = settings.weight_decay if decay_all else 0.0
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": settings.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": rest_decay}]
    # The fused kernel does the whole update in one pass per tensor (measured ~3x faster on CPU than foreach).
    return torch.optim.AdamW(groups, lr=lr, betas=settings.betas, eps=settings.eps, fused=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def max_grad_norm(grad_clip: float) -> float:
    """The norm gradients are clipped to: `grad_clip`, or no limit when it is 0."""
    return grad_clip if grad_clip > 0 else math.inf


def clip(params: list[torch.Tensor], grad_clip: float) -> None:
    """Scale the gradients of `params` down to the global norm `grad_clip` (0: no limit). Pretraining's parallel
    wrappers clip through pretraining/distributed.py `clip_grad_norm` by the same rule."""
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm(grad_clip))


def clip_stacked(grads: dict[str, torch.Tensor], grad_clip: float) -> None:
    """`clip` for K runs' gradients stacked along their first dimension (the batched engine): each run's own global
    norm and coefficient (<= 1), vectorised."""
    limit = max_grad_norm(grad_clip)
    K = next(iter(grads.values())).shape[0]
    sq = torch.stack([g.reshape(K, -1).float().pow(2).sum(1) for g in grads.values()]).sum(0)  # (K,)
    coef = (limit / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for g in grads.values():
        g.mul_(coef.view(K, *([1] * (g.ndim - 1))).to(g.dtype))


def autocast(dtype: str, device: torch.device) -> AbstractContextManager:
    """bf16 autocast for dtype "bf16"; nothing for "fp32"."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()


# ---- the compute dtype -------------------------------------------------------------------------------------------


def bf16_is_native(device: str) -> bool:
    """Whether `device` ("cpu", "cuda", "cuda:1") multiplies bf16 matrices at full speed: a CUDA device of compute
    capability 8.0 or more (older ones emulate bf16), or a CPU where oneDNN has bf16 kernels (AVX-512 or AMX on x86,
    the bf16 extension on Arm). Elsewhere PyTorch falls back to a generic loop: on a 2-core AMD EPYC with AVX2 only,
    a micro pretraining step took 11.7 s in bf16 against 0.95 s in fp32 (docs/benchmarks.md)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(torch.device(device))[0] >= 8
    if kind == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return True


def default_device() -> torch.device:
    """What `device: auto` means: CUDA when PyTorch sees a device, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_dtype(dtype: str, device: str) -> str:
    """A config's dtype as it runs: "auto" is bf16 where bf16 is native on `device` (`bf16_is_native`; "auto":
    `default_device()`), else fp32."""
    if dtype != "auto":
        return dtype
    return "bf16" if bf16_is_native(str(default_device()) if device == "auto" else device) else "fp32"


def slow_dtype_note(key: str, dtype: str, device: torch.device, auto_helps: bool = True) -> str | None:
    """The line a run says before its first step when its bf16 is not native here (it runs, many times slower)."""
    if dtype != "bf16" or bf16_is_native(str(device)):
        return None
    return (f"{key}: bf16 has no native matrix kernels on this {device.type} (it lacks {_bf16_needs(device)}): every "
            f"matrix product runs several times slower than in fp32 here" + (f"; `{key}: auto` takes fp32 on such "
                                                                              "machines" if auto_helps else ""))


def fp32_auto_note(key: str, asked: str, dtype: str, device: torch.device) -> str | None:
    """The line a study says before it trains when `auto` chose fp32 on a CPU: the times measured where bf16 is
    native (the README's) do not hold there."""
    if asked != "auto" or dtype != "fp32" or device.type != "cpu":
        return None
    return (f"{key}: auto runs in fp32 here: this CPU has no native bf16 matrix kernels (it lacks "
            f"{_bf16_needs(device)}), so training takes several times as long as on a CPU with them (the demo took "
            "42-46 minutes on a 2-core AMD EPYC with AVX2 only, against 11-21 elsewhere: README)")


def _bf16_needs(device: torch.device) -> str:
    """What gives `device` native bf16 matrix kernels (`bf16_is_native`), in its own terms."""
    if device.type == "cuda":
        return "compute capability 8.0"
    return "the bf16 extension" if platform.machine().lower() in ("arm64", "aarch64") else "AVX-512 or AMX"
