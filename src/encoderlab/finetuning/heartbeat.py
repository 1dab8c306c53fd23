"""A line at least every `HEARTBEAT_S` seconds while a sweep's runs train (a CPU run of a large model takes minutes a
run, and a sweep that prints only when a run ends looks dead), whichever engine trains them: the step of the run in
this process (sequential), the runs done, running and left (worker processes, `--workers N`), the group's step
(batched)."""
from __future__ import annotations

import time
from collections.abc import Callable

from encoderlab.runs.logging import HEARTBEAT_S, Beat

__all__ = ["HEARTBEAT_S", "Heartbeat", "minutes"]


def minutes(seconds: float) -> str:
    """A duration as every progress line of a sweep writes it."""
    return f"{seconds / 60:.1f} min"


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
