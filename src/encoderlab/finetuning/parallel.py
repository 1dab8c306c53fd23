"""Runs of a sweep spread over worker processes, each with its share of the CPU threads (`--workers`).

One fine-tuning run of a small model does not use several cores fully through one intra-op thread pool: its matrix
products are small, and the Python, optimizer and small kernels between them scale poorly with threads. N processes
with 1/N of the threads each do better: 1.09-1.26x on the project's 2-core CPU, more on the long-input tasks
(docs/benchmarks.md). The parent loads the checkpoint, prepares and checks every task
before anything trains, hands both to the workers once (spawned, so no thread pool is inherited half-initialised),
and writes every record itself, as the sequential sweep does: the records are the same, run for run.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

import torch

from encoderlab.core.errors import Failed, option_name
from encoderlab.core.process import start_worker
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import finetune, planned_steps
from encoderlab.model.config import ModelConfig
from encoderlab.tasks import registry
from encoderlab.tasks.base import EvalTask

_WORKER: dict = {}  # in a worker process: what every run needs, received once
POLL_S = 5.0  # how often the parent looks up from its workers' runs to let a progress line be said (a heartbeat)


def threads_per_worker(workers: int) -> int:
    return max(1, torch.get_num_threads() // workers)


def auto_workers(device: torch.device, engine: str, model_cfg: ModelConfig, runs: int) -> int:
    """`--workers auto`: on a CPU, one single-threaded process per thread torch would use, no more than there are
    runs and than half the memory holds (a run: fp32 weights, gradients and two AdamW moments, doubled for
    activations); 1 on a GPU, where the batched engine is the fast path, and with `--engine batched`."""
    if device.type != "cpu" or engine == "batched":
        return 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): trust the thread count
        memory = None
    fits = memory // (32 * model_cfg.num_parameters()) if memory else torch.get_num_threads()
    return max(1, min(torch.get_num_threads(), runs, fits))


def _init_worker(payload: bytes, threads: int, parent: int) -> None:
    # Ctrl-C ends a worker at once. Python's default would raise KeyboardInterrupt inside the run, which the pool
    # hands back as that run's result before taking the next one, so a sweep took its queued runs to stop.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    start_worker(parent)
    torch.set_num_threads(threads)
    tasks, model_cfg, weights, protocol = pickle.loads(payload)
    _WORKER.update(tasks=tasks, model_cfg=model_cfg, weights=weights, protocol=protocol)


def _run(task_name: str, lr: float, seed: int) -> dict:
    w = _WORKER
    return finetune(w["tasks"][task_name], w["model_cfg"], w["weights"], lr=lr, seed=seed,
                    protocol=w["protocol"].for_task(task_name), device=torch.device("cpu"))


def _cost(task: EvalTask, protocol: Protocol) -> float:
    """A run's relative cost, to start the longest first: tokens trained on, twice for retrieval (a query and a
    document per example, and a corpus to encode for scoring)."""
    return planned_steps(task, protocol) * protocol.length_for(task.family) * registry.family(task.family).sequences


def run_parallel(runs: Iterable[tuple[EvalTask, float, int]], model_cfg: ModelConfig,
                 weights: dict[str, torch.Tensor], protocol: Protocol, workers: int,
                 on_wait: Callable[[int, int], None] | None = None,
                 poll: float | None = None) -> Iterator[tuple[EvalTask, dict]]:
    """Train `runs` on `workers` processes; yields (task, record body) in this process as each finishes, and calls
    `on_wait(runs finished, runs running)` at least every `poll` seconds (default `POLL_S`; Heartbeat.waiting).

    The longest runs start first (steps x length), so that no long run is left alone at the end. An exception in
    a worker (a bug, not a diverged run: those come back as failed records) is raised once the runs under way have
    finished and been yielded; the runs not started are left for the next sweep. A worker process that dies (killed,
    or by the out-of-memory killer) ends the sweep with `Failed`, one line naming it (`worker_died`)."""
    runs = sorted(runs, key=lambda r: -_cost(r[0], protocol.for_task(r[0].name)))
    if not runs:
        return
    tasks = {t.name: t for t, _, _ in runs}
    # Plain pickle, as bytes: multiprocessing's own pickler would move every tensor to shared memory *in place*,
    # leaving the parent's NumPy views of those tensors (tasks keep some) pointing at freed memory, which the next
    # worker would then receive. Plain pickle copies and changes nothing here.
    payload = pickle.dumps((tasks, model_cfg, weights, protocol), protocol=pickle.HIGHEST_PROTOCOL)
    size = min(workers, len(runs))
    pool = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(payload, threads_per_worker(workers), os.getpid()))
    error: BaseException | None = None
    done, processes = 0, []
    try:
        pending: dict[Future, EvalTask] = {pool.submit(_run, t.name, lr, seed): t for t, lr, seed in runs}
        processes = list(getattr(pool, "_processes", {}).values())  # started by the submits: which one may die
        while pending:
            finished, _ = wait(pending, timeout=poll or POLL_S, return_when=FIRST_COMPLETED)
            for future in finished:
                task = pending.pop(future)
                if future.cancelled():
                    continue
                if future.exception() is not None:
                    # A bug, not a diverged run: start nothing new, but keep what the running ones finish.
                    error = error or future.exception()
                    for other in pending:
                        other.cancel()
                    continue
                done += 1
                yield task, future.result()
            if on_wait is not None:
                on_wait(done, min(size, len(pending)))
    finally:
        # Ctrl-C (or the caller closing this generator) reaches the workers too: nothing is waited for, and runs
        # without a record are redone next time.
        pool.shutdown(wait=False, cancel_futures=True)
    if isinstance(error, BrokenProcessPool):
        raise Failed(worker_died(processes, done)) from None
    if error is not None:
        raise error


def worker_died(processes: list[multiprocessing.process.BaseProcess], done: int) -> str:
    """Why the pool broke, in one line: the worker that died and how (its signal or exit code), and what is kept.
    The pool ends the other workers itself (SIGTERM) once one has died, so the first to die is one that ended
    otherwise, when there is one."""
    for process in processes:  # their exit codes are read once each is joined (a loaded machine may lag)
        process.join(timeout=2.0)
    ended = [p for p in processes if p.exitcode not in (None, 0)]
    dead = next((p for p in ended if p.exitcode != -signal.SIGTERM), ended[0] if ended else None)
    how, cause = "how is unknown", "killed, or out of memory"
    if dead is not None and dead.exitcode < 0:
        name = signal.Signals(-dead.exitcode).name if -dead.exitcode in signal.valid_signals() else -dead.exitcode
        how = f"pid {dead.pid}, killed by {name}"
        if dead.exitcode == -signal.SIGKILL:
            cause = "killed by hand (kill -9) or by the system's out-of-memory killer"
    elif dead is not None:
        how, cause = f"pid {dead.pid}, exit code {dead.exitcode}", "it crashed, or ran out of memory"
    return (f"a fine-tuning worker process died ({how}): {cause}; the sweep stopped. The {done} run(s) finished "
            "before are recorded, and running the sweep again resumes from them (if memory ran out: fewer "
            f"{option_name('workers')}, or a smaller batch_size or max_length in the protocol)")
