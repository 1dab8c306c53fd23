"""The study scheduler's bookkeeping and executor, on jobs that run nothing: what is ready, what a failure skips."""
from __future__ import annotations

import os
import signal
import time

import pytest

from encoderlab.study.scheduler import WORKER_DIED, JobStates, Job, run_jobs


class Stub(Job):
    """A job of the kind its id starts with, that runs nothing (the scheduler knows no more of a job)."""

    def __init__(self, id: str, deps: list[str] | None = None, cost: float = 1.0) -> None:
        super().__init__(id=id, deps=deps or [], cost=cost)
        self.kind = id.split(":")[0]


def chain(tmp_path) -> list[Job]:
    """A trunk, a branch off its step-4 checkpoint, a run initialised from the trunk, and their evaluations."""
    return [Stub("pretrain:trunk", [], cost=8.0),
            Stub("pretrain:branch", [f"pretrain:trunk@{tmp_path / 'step-4'}"], cost=4.0),
            Stub("pretrain:cpt", ["pretrain:trunk"], cost=2.0),
            Stub("eval:trunk", ["pretrain:trunk"]),
            Stub("eval:branch", ["pretrain:branch"]),
            Stub("eval:other", ["pretrain:elsewhere"])]  # a dependency not selected: counts as done


def test_ready_follows_dependencies_and_checkpoints(tmp_path):
    states = JobStates(chain(tmp_path), done=set())
    assert [j.id for j in states.ready()] == ["pretrain:trunk", "eval:other"]  # pretraining first
    (tmp_path / "step-4").mkdir()  # the trunk wrote the branch point: the branch need not wait for the end
    assert [j.id for j in states.ready()] == ["pretrain:trunk", "pretrain:branch", "eval:other"]
    states.finish(states.ready()[0])
    assert [j.id for j in states.ready()] == ["pretrain:branch", "pretrain:cpt", "eval:other", "eval:trunk"]
    assert states.done_now == 1 and "pretrain:trunk" in states.done


def test_a_failure_skips_every_dependent_and_nothing_else(tmp_path):
    (tmp_path / "step-4").mkdir()
    states = JobStates(chain(tmp_path), done=set())
    states.fail(states.ready()[0], "RuntimeError: disk on fire")
    assert states.skipped == {"pretrain:branch", "pretrain:cpt", "eval:trunk", "eval:branch"}
    assert [j.id for j in states.pending] == ["eval:other"] and list(states.failed) == ["pretrain:trunk"]
    assert JobStates(chain(tmp_path), done={"pretrain:trunk"}).pending[0].id == "pretrain:branch"  # done: not redone


def test_in_process_execution_records_errors_and_stops_on_ctrl_c(tmp_path, monkeypatch):
    def execute(job, log=None, **progress):
        if job.id == "pretrain:trunk":
            raise RuntimeError("disk on fire")
        if job.id == "eval:other":
            raise KeyboardInterrupt
        return {"seconds": 0.0}

    states = JobStates(chain(tmp_path), done=set())
    outcomes = run_jobs(states, 1, execute)
    job, result, error = next(outcomes)
    assert job.id == "pretrain:trunk" and result is None
    assert error.splitlines()[0] == "RuntimeError: disk on fire" and "Traceback" in error
    states.fail(job, error)
    with pytest.raises(KeyboardInterrupt):  # the next ready job is eval:other
        next(outcomes)


def kill_a_or_wait(job) -> dict:
    """A job run in a worker process: job `a` kills its own worker (as kill -9 or the out-of-memory killer would)."""
    if job.id == "pretrain:a":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(2.0 if job.id == "pretrain:b" else 0.0)
    return {"seconds": 0.0}


def test_a_dead_worker_fails_the_jobs_of_its_pool_and_the_rest_goes_on_in_a_new_one():
    """A killed worker broke the pool: BrokenProcessPool's traceback ended the whole study. Now the jobs running in
    that pool fail, by name and with that reason, their dependents are skipped, and the other jobs still run."""
    jobs = [Stub("pretrain:a", [], cost=8.0), Stub("pretrain:b", [], cost=4.0),
            Stub("eval:a", ["pretrain:a"]), Stub("eval:c", [])]
    states = JobStates(jobs, done=set())
    for job, _, error in run_jobs(states, 2, kill_a_or_wait):  # as run_study records them
        states.finish(job) if error is None else states.fail(job, error)
    assert "pretrain:a" in states.failed and states.skipped == {"eval:a"} and not states.pending
    assert all(reason.startswith(WORKER_DIED) and reason.endswith("it resumes on the next study run")
               for reason in states.failed.values())
    # b ran beside a, so it normally fails with a's pool (which job lost its worker cannot be told); on a loaded
    # machine b (and even c) may finish before the death is seen. Either way every job ended, and one that had not
    # run when the pool broke ran in a new one.
    assert set(states.failed) | states.done == {"pretrain:a", "pretrain:b", "eval:c"}
    assert "eval:c" in states.done or "pretrain:b" in states.done


class _BrokenOnce:
    """A pool that broke between two jobs (its worker died while idle): it refuses the next submit."""

    def __init__(self):
        self.pools = 0

    def __call__(self, *args, **kwargs):
        from concurrent.futures.process import BrokenProcessPool

        from encoderlab.study.scheduler import _InProcess

        self.pools += 1
        pool = _InProcess()
        if self.pools == 1:
            def submit(*a, **k):
                raise BrokenProcessPool("a worker died while idle")
            pool.submit = submit
        return pool


def test_a_pool_found_broken_between_jobs_is_replaced_not_taken_for_the_end(monkeypatch):
    """With nothing running, a refused submit once ended the scheduling: the jobs left were neither run nor failed."""
    from encoderlab.study import scheduler

    factory = _BrokenOnce()
    monkeypatch.setattr(scheduler, "ProcessPoolExecutor", factory)
    states = JobStates([Stub("pretrain:a", []), Stub("eval:a", ["pretrain:a"])], done=set())
    for job, _, error in run_jobs(states, 2, lambda job: {"seconds": 0.0}):
        states.finish(job) if error is None else states.fail(job, error)
    assert factory.pools == 2 and states.done == {"pretrain:a", "eval:a"} and not states.pending


def test_a_job_that_can_never_run_fails_by_name(tmp_path):
    """A branch point that never appears (no job writes it): its job and their dependents end failed and skipped,
    never left pending while the study reports success."""
    jobs = [Stub("pretrain:b", [f"pretrain:gone@{tmp_path / 'step-4'}"]),
            Stub("eval:b", ["pretrain:b"])]
    states = JobStates(jobs, done=set())
    for job, _, error in run_jobs(states, 1, lambda job: {"seconds": 0.0}):
        states.finish(job) if error is None else states.fail(job, error)
    assert list(states.failed) == ["pretrain:b"] and states.skipped == {"eval:b"} and not states.pending
    assert states.failed["pretrain:b"].startswith("it never became ready to run: it waits for pretrain:gone@")


class Talker(Stub):
    """A job that says how it goes, as a pretraining run's steps and a sweep's heartbeat do."""

    def execute(self, log, progress) -> dict:
        progress("step 1/2")
        progress("step 2/2")
        return {"seconds": 0.0}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_jobs_progress_goes_to_the_studys_log_and_nowhere_else(workers, capfd):
    """A job's heartbeat was printed on stderr from wherever it ran: `run_study(..., log=lambda m: None)` was not
    silent. It goes to the study's log now, from this process or from a spawned worker."""
    from encoderlab.study.runner import _run_in_worker

    said: list[str] = []
    states = JobStates([Talker("pretrain:a"), Talker("eval:a", ["pretrain:a"])], done=set())
    for job, _, error in run_jobs(states, workers, _run_in_worker, say=said.append):
        assert error is None
        states.finish(job)
    assert said == [f"{job}: step {i}/2" for job in ("pretrain:a", "eval:a") for i in (1, 2)]
    assert capfd.readouterr() == ("", "")
