"""Which engine trains a task's runs: "sequential" (`finetune`, one run after another) or "batched" (`batched`).

`auto` decides per task from measurement, not assumption: on CUDA the batched engine (one small fine-tuning run
leaves most of a GPU idle) once a trial step shows that vmap can batch every operation there; on a CPU, which one
small run already keeps busy with matrix products, whichever a short probe times faster on the task's own first
batches. The engine is not part of the protocol: both give the same records, up to float rounding.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor

from encoderlab.errors import EncoderlabError
from encoderlab.evaluation.batched import Group, group_size, split_groups
from encoderlab.evaluation.finetune import Run, planned_steps
from encoderlab.evaluation.protocol import Protocol
from encoderlab.evaluation.tasks.base import EvalTask
from encoderlab.model.config import ModelConfig

ENGINES = ("auto", "sequential", "batched")
PROBE_MIN_STEPS = 100  # shorter grids: the probe would cost more than batching can save on a CPU
PROBE_MARGIN = 1.1  # batched must measure this much faster: the sequential engine is the reference
_probed: dict[tuple, float] = {}


def choose_engine(requested: str, task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor],
                  runs: list[tuple[float, int]], protocol: Protocol, device: torch.device,
                  log: Callable[[str], None] = lambda m: None) -> str:
    """"sequential" or "batched" for the runs of one task. "auto": batched on CUDA (one small run leaves most of
    the GPU idle) once one batched step of two runs has worked there; on a CPU, which one small run already keeps
    busy, whichever a short probe measures faster."""
    if requested not in ENGINES:
        raise EncoderlabError(f"engine {requested!r} is not one of {', '.join(ENGINES)}")
    if requested != "auto":
        return requested
    if len(runs) < 2:
        return "sequential"
    if device.type == "cuda":
        problem = batched_step_fails(task, model_cfg, weights, runs[:2], protocol, device)
        if problem:
            log(f"{task.name}: the batched engine failed a trial step on {device} ({problem}); runs go sequentially")
        return "sequential" if problem else "batched"
    if device.type != "cpu" or planned_steps(task, protocol) < PROBE_MIN_STEPS:
        return "sequential"
    size = min(len(runs), group_size(task, model_cfg, protocol, device))
    group = split_groups(runs, size)[0]
    key = (task.name, model_cfg.model_dump_json(), protocol.model_dump_json(), len(group), torch.get_num_threads())
    if key not in _probed:
        _probed[key] = probe_speedup(task, model_cfg, weights, group, protocol, device)
    speedup = _probed[key]
    chosen = "batched" if speedup >= PROBE_MARGIN else "sequential"
    log(f"{task.name}: {len(group)} runs batched measured {speedup:.2f}x the speed of sequential runs here: {chosen}")
    return chosen


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


def probe_speedup(task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor], runs: list[tuple[float, int]],
                  protocol: Protocol, device: torch.device) -> float:
    """K sequential steps over one batched step, timed on the runs' first batches (each after a warm-up step).

    Throwaway copies are trained, so no run is affected; the cost is about three steps of every run."""
    counts = Counter(seed for _, seed in runs)
    batches = {seed: next(task.train_batches(protocol.batch_size, seed)) for seed in counts}
    lr, seed = runs[0]
    sequential = Run(task, model_cfg, weights, seed, protocol, device)
    sequential.step(batches[seed], lr)
    seconds_sequential = 0.0
    for seed, batch in batches.items():
        seconds_sequential += counts[seed] * _timed(lambda b=batch, run=sequential: run.step(b, lr), device)
    del sequential  # its memory goes back before the group takes its share
    group = Group(task, model_cfg, weights, runs, protocol, device)
    group.step(batches)
    seconds_batched = _timed(lambda: group.step(batches), device)
    return seconds_sequential / seconds_batched


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started
