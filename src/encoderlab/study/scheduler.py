"""The study's scheduler: which jobs are ready, failed or skipped (`JobStates`), and running them, in this process or in
worker processes, as their dependencies allow (`run_jobs`).

A worker process that dies (killed, or ended by the kernel's out-of-memory killer) breaks its pool: every job then
running fails with that reason (which of them lost its worker cannot be told), their dependents are skipped, and the
rest of the study goes on in a new pool. The jobs that failed so resume on the next `study run` (a pretraining run
from its last checkpoint, a sweep from its records).
"""
from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import ClassVar

from encoderlab.core.process import start_worker

WORKER_DIED = ("its worker process died (killed by a signal: kill -9, or the kernel's out-of-memory killer) while "
               "this job or one beside it ran")


@dataclass(kw_only=True)
class Job:
    """What the scheduler knows of a job; each kind (study/jobs.py) says when it is done and how it runs."""
    kind: ClassVar[str] = "job"  # "pretrain", "random", "eval" or "mteb": evaluations are started last
    id: str
    deps: list[str] = field(default_factory=list)  # job ids, or "JOB@PATH": that job's checkpoint at PATH exists
    cost: float = 1.0  # ordering hint: big jobs first keep the workers busy to the end

    def is_done(self) -> bool:
        raise NotImplementedError

    def execute(self, log: Callable[[str], None], progress: Callable[[str], None] | None) -> dict:
        """Run to the end; a short summary. Raises on failure (the scheduler records it)."""
        raise NotImplementedError


# Where a running job's progress lines go (`progress`): the study's `say`, in this process; in a spawned worker, the
# queue that `run_jobs` reads between its waits and hands to `say`.
_say: Callable[[str], None] | None = None


def progress(message: str) -> None:
    """A running job's progress line, said through the `say` that `run_jobs` was given, in whichever process the job
    runs (nowhere outside `run_jobs`)."""
    if _say is not None:
        _say(message)


def _init_worker(threads: int, parent: int, lines) -> None:
    global _say
    start_worker(parent)  # a killed study leaves no worker writing into its folders
    _say = lines.put
    import torch

    torch.set_num_threads(threads)


class JobStates:
    """Where each job of one start stands: done, failed, skipped (a dependency failed) or pending. A dependency
    not among `jobs` (not selected this time) counts as done."""

    def __init__(self, jobs: list[Job], done: set[str]):
        self.ids, self.done, self.done_now = {j.id for j in jobs}, done, 0
        self.pending = [j for j in jobs if j.id not in done]
        self.failed: dict[str, str] = {}
        self.skipped: set[str] = set()

    def ready(self) -> list[Job]:
        """Pending jobs whose dependencies are met, pretraining and the biggest first."""
        out = [j for j in self.pending if all(self._met(d) for d in j.deps)]
        return sorted(out, key=lambda j: (j.kind in ("eval", "mteb"), -j.cost, j.id))

    def _met(self, dep: str) -> bool:
        job, _, path = dep.partition("@")
        if path:  # a branch point: that checkpoint is written, by a run that has not failed
            return job not in self.failed and (job in self.done or Path(path).exists())
        return job in self.done or job not in self.ids

    def finish(self, job: Job) -> None:
        self.pending.remove(job)
        self.done.add(job.id)
        self.done_now += 1

    def fail(self, job: Job, error: str) -> list[str]:
        """Record `job` as failed and skip every job that depends on it; returns those, in order."""
        self.pending.remove(job)
        self.failed[job.id] = error
        blocked = [job.id]
        for other in list(self.pending):  # in `jobs_of` order: a job comes after the jobs it depends on
            if any(d.partition("@")[0] in blocked for d in other.deps):
                self.pending.remove(other)
                self.skipped.add(other.id)
                blocked.append(other.id)
        return blocked[1:]


class _InProcess(Executor):
    """`workers` 1: a job runs in this process as it is submitted, so a Ctrl-C stops it where it is."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - any failure of one job is recorded, the study goes on
            future.set_exception(exc)
        return future


def run_jobs(states: JobStates, workers: int, run: Callable,
             say: Callable[[str], None] = lambda m: None) -> Iterator[tuple[Job, dict | None, str | None]]:
    """Runs `run(job)` for the jobs `states` has ready until none is; yields (job, result, error) as each job
    ends. The caller records each in `states` before asking for the next, so what is ready follows. `run` is a
    module-level function (it travels to spawned workers); what a job tells `progress` goes to `say`, here."""
    global _say
    workers = max(1, workers)
    lines = get_context("spawn").SimpleQueue() if workers > 1 else None
    before, _say = _say, say if workers <= 1 else None
    try:
        yield from _schedule(states, workers, run, lines, say)
    finally:
        _say = before


def _schedule(states: JobStates, workers: int, run: Callable, lines, say: Callable[[str], None]):
    while True:
        pool = _InProcess() if workers <= 1 else ProcessPoolExecutor(
            workers, mp_context=get_context("spawn"), initializer=_init_worker,
            initargs=(max(1, (os.cpu_count() or 1) // workers), os.getpid(), lines))
        with pool:
            broke = yield from _drive(pool, states, workers, run, lambda: _said(lines, say))
        _said(lines, say)
        if not broke:
            for job in list(states.pending):  # never left neither done nor failed (the caller fails its dependents)
                if job in states.pending:
                    yield job, None, f"it never became ready to run: it waits for {', '.join(job.deps)}"
            return


def _said(lines, say: Callable[[str], None]) -> None:
    """The progress lines the workers queued so far, handed to `say`."""
    while lines is not None and not lines.empty():
        say(lines.get())


def _drive(pool: Executor, states: JobStates, workers: int, run: Callable, said: Callable[[], None]):
    """Feed one pool until nothing is ready (returns False) or the pool breaks (True); between waits, `said` hands on
    what the workers said."""
    running: dict[Future, Job] = {}
    while True:
        busy = {j.id for j in running.values()}
        try:
            for job in [j for j in states.ready() if j.id not in busy][:workers - len(running)]:
                running[pool.submit(run, job)] = job
        except BrokenProcessPool:  # seen below as the running jobs' exception; with none running, a new pool
            if not running:
                return True
        if not running:
            return False
        # a timeout, so branches start when their checkpoint appears, not only when a job ends
        finished, _ = wait(running, timeout=2.0, return_when=FIRST_COMPLETED)
        said()
        broke = any(isinstance(f.exception(), BrokenProcessPool) for f in finished)
        for future in list(running) if broke else finished:  # a broken pool fails every job it held
            job, exc = running.pop(future), future.exception() if future.done() else BrokenProcessPool()
            if exc is None:
                yield job, future.result(), None
            elif isinstance(exc, BrokenProcessPool):
                yield job, None, f"{WORKER_DIED}; it resumes on the next study run"
            elif isinstance(exc, Exception):
                yield job, None, _reason(exc)
            else:  # a Ctrl-C in a worker stops the study, as one in this process does
                raise exc
        if broke:
            return True


def _reason(exc: BaseException) -> str:
    """A failed job's reason: the error, then (a job run in this process) where it was raised."""
    where = "\n" + "".join(traceback.format_exception(exc, limit=4)) if exc.__traceback__ else ""
    return f"{type(exc).__name__}: {exc}{where}"


