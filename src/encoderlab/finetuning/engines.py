"""Which engine trains a task's runs: "sequential" (`finetune`, one run after another) or "batched" (`batched`).

`auto` decides from the device and the task, never from a timing: on CUDA the batched engine (one small fine-tuning
run leaves most of a GPU idle) once a trial step shows that vmap can batch every operation there; on a CPU, which
one small run already keeps busy with matrix products, the sequential one. The engine is not part of the protocol:
both give the same records up to float rounding, but bf16 rounding differences grow over a run's steps, and on a
random-init model they moved a retrieval run's nDCG@10 by 2 points (4.24 sequential, 6.35 batched: as much as
its seeds differ). A choice made from a timing (a probe of which engine is faster on a CPU) would make a study's
numbers depend on the machine's load; each record names the engine that produced it.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from encoderlab.core.errors import EncoderlabError, option
from encoderlab.finetuning.batched import Group
from encoderlab.finetuning.protocol import Protocol
from encoderlab.model.config import ModelConfig
from encoderlab.tasks.base import EvalTask

ENGINES = ("auto", "sequential", "batched")


def choose_engine(requested: str, task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor],
                  runs: list[tuple[float, int]], protocol: Protocol, device: torch.device,
                  log: Callable[[str], None] = lambda m: None) -> str:
    """"sequential" or "batched" for the runs of one task. "auto": batched on CUDA (one small run leaves most of
    the GPU idle) once one batched step of two runs has worked there; sequential anywhere else."""
    if requested not in ENGINES:
        raise EncoderlabError(f"{option('engine', requested, quote=True)} is not one of {', '.join(ENGINES)}")
    if requested == "batched" and device.type == "cpu" and len(runs) > 1:
        log(f"{task.name}: the batched engine, as asked, on a CPU: it is slower there than one run after another "
            f"(docs/benchmarks.md); {option('engine', 'auto')} takes the sequential one")
    if not isinstance(model_cfg, ModelConfig) and (requested == "batched" or
                                                   (requested == "auto" and device.type == "cuda" and len(runs) > 1)):
        log(f"{task.name}: the batched engine trains encoderlab's own backbone; this {model_cfg.model_type} model's "
            "runs go one after another (the sequential engine)")
        return "sequential"
    if requested != "auto":
        return requested
    if len(runs) < 2 or device.type != "cuda":
        return "sequential"
    problem = batched_step_fails(task, model_cfg, weights, runs[:2], protocol, device)
    if problem:
        log(f"{task.name}: the batched engine failed a trial step on {device} ({problem}); runs go sequentially")
    return "sequential" if problem else "batched"


def batched_step_fails(task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor],
                       runs: list[tuple[float, int]], protocol: Protocol, device: torch.device) -> str | None:
    """Why one batched step of these runs fails on this device (an operation vmap cannot batch there), or None.

    A trial on throwaway copies: `auto` must never make a sweep fail that the sequential engine would finish."""
    try:
        Group(task, model_cfg, weights, runs, protocol, device).step()
    except (RuntimeError, NotImplementedError) as e:
        return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return None
