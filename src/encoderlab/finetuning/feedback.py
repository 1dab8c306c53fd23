"""What a sweep says before and while it trains: the memory a run will need, refused in one line when it cannot fit,
and a line at least every `HEARTBEAT_S` seconds while runs train (a CPU run of a large model takes minutes a run,
and a sweep that prints only when a run ends looks dead), whichever engine trains them: the step of the run in this
process (sequential), the runs done, running and left (worker processes, `--workers N`), the group's step (batched).

The memory is estimated from shapes, not measured: weights, gradients and AdamW's two moments in the protocol's
weight dtype, the checkpoint's weights the sweep keeps to start every run from, and the activations a backward keeps
per layer at the protocol's batch and length (norm inputs and outputs, q/k/v, the attention output and its
probabilities, SwiGLU's gate, up, activation and product). It is the order of magnitude that decides whether a run
can fit, not a prediction to the megabyte.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from encoderlab.core.errors import EncoderlabError
from encoderlab.runs.logging import HEARTBEAT_S, Beat

LIMIT_ENV = "ENCODERLAB_MEMORY_LIMIT_GB"  # a limit of your own (a shared machine, a job's allocation); tests force one
GB = 1024**3


@dataclass
class Estimate:
    weights: int  # weights, gradients, AdamW moments and the sweep's copy of the checkpoint's weights
    activations: int
    sequences: int  # per training batch
    length: int

    @property
    def total(self) -> int:
        return self.weights + self.activations

    def parts(self) -> str:
        return (f"{size(self.weights)} weights, gradients and AdamW state, {size(self.activations)} activations at "
                f"{self.sequences} sequences x {self.length} tokens")


def minutes(seconds: float) -> str:
    """A duration as every progress line of a sweep writes it."""
    return f"{seconds / 60:.1f} min"


def size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB / 10 else f"{n / 1024**2:.1f} MB"


def estimate(model_cfg, task, protocol) -> Estimate:
    """One run of `task` under `protocol` (the task's own, overrides applied)."""
    params = model_cfg.num_parameters(include_embeddings=False) + model_cfg.vocab_size * model_cfg.hidden_size
    wbytes = 2 if protocol.weights == "bf16" else 4
    abytes = 2 if protocol.dtype == "bf16" else 4
    length = protocol.length_for(task.family)
    sequences = protocol.batch_size * (2 if task.family == "retrieval" else 1)  # a query and its document
    h, f, heads = model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.num_attention_heads
    kv = model_cfg.num_key_value_heads * model_cfg.head_size
    per_token_layer = 6 * h + 2 * kv + 4 * f + heads * length
    activations = sequences * length * (model_cfg.num_hidden_layers * per_token_layer + 2 * h) * abytes
    return Estimate(params * (4 * wbytes + 4), activations, sequences, length)


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
        est = estimate(model_cfg, task, own)
        need = est.total * max(1, workers)
        at_once = f" x {workers} workers" if workers > 1 else ""
        log(f"{task.name}: memory estimate {size(need)} ({est.parts()}){at_once}; "
            + (f"{size(limit)} {source}" if limit is not None else "available memory unknown"))
        if limit is not None and need > limit:
            raise EncoderlabError(
                f"{task.name}: a fine-tuning run needs about {size(need)}{at_once} ({est.parts()}), more "
                f"than the {size(limit)} {source}; nothing was run: lower its length or batch in the protocol, "
                f"e.g. task_overrides: {{{task.name}: {{max_length: {max(16, est.length // 4)}, batch_size: "
                f"{max(1, own.batch_size // 4)}}}}}" + (", or fewer --workers" if workers > 1 else ""))


class Heartbeat(Beat):
    """Lines while runs train: the first step's time with what it makes of a run and of the runs left, then the
    step, its pace and the run's ETA at least every `every` seconds; for runs trained in worker processes, the runs
    done, running and left with an ETA at the finished runs' pace (`waiting`)."""

    def __init__(self, log: Callable[[str], None], runs: int, every: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(every, clock)
        self.log, self.runs = log, runs
        self.begun = self.started = self.last
        self.what, self.first_said, self.run = "", False, 0

    def start(self, what: str) -> None:
        self.what, self.run = what, self.run + 1
        self.started = self.last = self.clock()

    def step(self, done: int, total: int) -> None:
        now = self.clock()
        pace = (now - self.started) / done
        if not self.first_said:
            self.first_said, self.last = True, now
            self.log(f"{self.what}: first step {pace:.2f} s; a run of {total} steps ~{minutes(pace * total)} "
                     f"of training, the {self.runs} runs to do ~{minutes(pace * total * self.runs)} (scoring "
                     "not included)")
        elif self.due() is not None:
            self.log(f"{self.what} (run {self.run} of {self.runs}): step {done}/{total}, {pace:.2f} s/step, this run's "
                     f"training ends in ~{minutes(pace * (total - done))}")

    def waiting(self, done: int, running: int) -> None:
        """Runs trained elsewhere (worker processes), asked often: a line when one is due. The ETA is the finished
        runs' pace (wall time per finished run, the workers' overlap included) times the runs not finished."""
        if (now := self.due()) is None:
            return
        spent = now - self.begun
        eta = (f"~{minutes(spent / done * (self.runs - done))} left at the finished runs' pace" if done
               else "no run finished yet to time the rest by")
        self.log(f"{done} of {self.runs} runs done, {running} running, {self.runs - done - running} waiting; "
                 f"{minutes(spent)} so far, {eta}")
