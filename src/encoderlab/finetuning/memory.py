"""The memory a fine-tuning run will need, said by a sweep before its first run and refused in one line when it
cannot fit (`check_memory`).

The memory is estimated from shapes, and each part was measured (tests/integration/test_memory_estimate.py runs
real fine-tuning steps in a fresh process and holds the estimate within 15% of its peak resident memory):
- weights, gradients and AdamW's two moments in the protocol's weight dtype, and the checkpoint's weights the sweep
  keeps to start every run from; under bf16 autocast with fp32 weights, the bf16 copy of every matrix that autocast
  keeps for the step;
- the activations a backward keeps, per token and layer, counted with autograd's saved-tensor hooks on this model
  (`ACTIVATION_BYTES`): the two norms' fp32 inputs and outputs, autocast's bf16 copies of a linear's input (one per
  projection), q and k after RoPE and v at the heads' width, the attention probabilities (fp32 from the softmax,
  and their bf16 copy), the output projection's input, and SwiGLU's gate, up, activation and product;
- on CPU, the process itself: its resident memory when the sweep starts (Python, torch, encoderlab and the tasks'
  data as this environment loads them: 240 and 300 MB after the same imports in two venvs of one machine), read from
  `/proc/self/statm`, and `WORKING_BYTES` that the libraries' thread pools and kernels take once a model trains.
  What is already resident is not asked of the machine again: a run in this process needs the rest of its estimate
  from the available RAM, a worker process all of it (a GPU's free memory is measured after these).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from encoderlab.core.errors import EncoderlabError, option_name
from encoderlab.tasks import registry

LIMIT_ENV = "ENCODERLAB_MEMORY_LIMIT_GB"  # a limit of your own (a shared machine, a job's allocation); tests force one
GB = 1024**3
# Bytes kept for the backward per token and layer: (per hidden unit, per FFN unit, per head and attended position),
# by compute dtype; measured with saved-tensor hooks, exact to a few bytes for this model's layers (eager attention).
ACTIVATION_BYTES = {"bf16": (34, 8, 6), "fp32": (40, 16, 4)}
# What the libraries' thread pools and kernels hold once a model trains, over a process's footprint after imports
# (~0.1 GB, measured on an AMD EPYC, 2 cores, Linux); and that footprint where /proc cannot say (0.25 GB there).
WORKING_BYTES = 100 * 1024**2
IMPORTED_BYTES = 250 * 1024**2


@dataclass
class Estimate:
    weights: int  # weights, gradients, AdamW moments, the sweep's copy of the checkpoint's weights, autocast's copies
    activations: int
    sequences: int  # per training batch
    length: int
    runtime: int = 0  # the process itself (CPU)
    resident: int = 0  # of `runtime`, what this process holds already

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.runtime

    def parts(self) -> str:
        said = (f"{size(self.weights)} weights, gradients and AdamW state, {size(self.activations)} activations at "
                f"{self.sequences} sequences x {self.length} tokens")
        return said + (f", {size(self.runtime)} the process itself" if self.runtime else "")

    def to_ask(self, workers: int) -> int:
        """Bytes the machine must still give: a run in this process has `resident` already; each worker process
        (`workers` > 1) starts with nothing."""
        return self.total * workers if workers > 1 else self.total - self.resident


def size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB / 10 else f"{n / 1024**2:.1f} MB"


def estimate(model_cfg, task, protocol, device: torch.device = torch.device("cpu")) -> Estimate:
    """One run of `task` under `protocol` (the task's own, overrides applied) on `device`."""
    params = model_cfg.num_parameters(include_embeddings=False) + model_cfg.vocab_size * model_cfg.hidden_size
    wbytes = 2 if protocol.weights == "bf16" else 4
    h, f, heads = model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.num_attention_heads
    layers = model_cfg.num_hidden_layers
    kv = model_cfg.num_key_value_heads * model_cfg.head_size
    matrices = layers * (2 * h * (heads * model_cfg.head_size + kv) + 3 * h * f)  # attention's four, SwiGLU's three
    cast = 2 * matrices if protocol.dtype == "bf16" and wbytes == 4 else 0  # autocast's bf16 copy, kept for the step
    length = protocol.length_for(task.family)
    sequences = protocol.batch_size * registry.family(task.family).sequences  # retrieval: a query and its document
    per_h, per_f, per_attended = ACTIVATION_BYTES["bf16" if protocol.dtype == "bf16" else "fp32"]
    per_token_layer = per_h * h + per_f * f + per_attended * heads * length
    activations = sequences * length * (layers * per_token_layer + 12 * h)  # + the embedding and final norm, fp32
    resident = resident_bytes() if device.type == "cpu" else 0
    runtime = resident + WORKING_BYTES if device.type == "cpu" else 0
    return Estimate(params * (4 * wbytes + 4) + cast, activations, sequences, length, runtime, resident)


def resident_bytes() -> int:
    """This process's resident memory now (Linux's /proc/self/statm), or `IMPORTED_BYTES` where it cannot say."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return IMPORTED_BYTES


def available(device: torch.device) -> tuple[int | None, str]:
    """Bytes a run may use and where that number comes from; None when nothing says."""
    if limit := os.environ.get(LIMIT_ENV):
        try:
            return int(float(limit) * GB), f"{LIMIT_ENV}={limit}"
        except ValueError:
            raise EncoderlabError(f"{LIMIT_ENV}={limit!r} is not a number of GB (e.g. 16 or 7.5)") from None
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free memory of {device}"
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return int(info["MemAvailable"].split()[0]) * 1024, "available RAM"
    except (OSError, KeyError, ValueError):
        return None, "unknown"


def check_memory(tasks, protocol, model_cfg, device: torch.device, workers: int,
                 log: Callable[[str], None]) -> None:
    """Say each task's estimate; refuse, before any run, a task whose runs (`workers` at once) cannot fit."""
    limit, source = available(device)
    for task in tasks:
        own = protocol.for_task(task.name)
        est = estimate(model_cfg, task, own, device)
        need = est.total * max(1, workers)
        # a limit of the user's own bounds the whole process; the available RAM is what is left beside it
        asked = need if source.startswith(LIMIT_ENV) else est.to_ask(workers)
        at_once = f" x {workers} workers" if workers > 1 else ""
        log(f"{task.name}: memory estimate {size(need)} ({est.parts()}){at_once}; "
            + (f"{size(limit)} {source}" if limit is not None else "available memory unknown"))
        if limit is not None and asked > limit:
            raise EncoderlabError(
                f"{task.name}: a fine-tuning run needs about {size(need)}{at_once} ({est.parts()})"
                + (f", {size(asked)} beyond what this process holds," if asked != need else ",")
                + f" more than the {size(limit)} {source}; nothing was run: lower its length or batch in the protocol, "
                f"e.g. task_overrides: {{{task.name}: {{max_length: {max(16, est.length // 4)}, batch_size: "
                f"{max(1, own.batch_size // 4)}}}}}" + (f", or fewer {option_name('workers')}" if workers > 1 else ""))
