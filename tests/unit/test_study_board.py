"""The study scheduler's bookkeeping and executor, on jobs that run nothing: what is ready, what a failure skips."""
from __future__ import annotations

import pytest

from encoderlab.study import runner
from encoderlab.study.runner import Board, Job


def chain(tmp_path) -> list[Job]:
    """A trunk, a branch off its step-4 checkpoint, a run initialised from the trunk, and their evaluations."""
    return [Job("pretrain:trunk", "pretrain", [], {}, cost=8.0),
            Job("pretrain:branch", "pretrain", [f"pretrain:trunk@{tmp_path / 'step-4'}"], {}, cost=4.0),
            Job("pretrain:cpt", "pretrain", ["pretrain:trunk"], {}, cost=2.0),
            Job("eval:trunk", "eval", ["pretrain:trunk"], {}),
            Job("eval:branch", "eval", ["pretrain:branch"], {}),
            Job("eval:other", "eval", ["pretrain:elsewhere"], {})]  # a dependency not selected: counts as done


def test_ready_follows_dependencies_and_checkpoints(tmp_path):
    board = Board(chain(tmp_path), done=set())
    assert [j.id for j in board.ready()] == ["pretrain:trunk", "eval:other"]  # pretraining first
    (tmp_path / "step-4").mkdir()  # the trunk wrote the branch point: the branch need not wait for the end
    assert [j.id for j in board.ready()] == ["pretrain:trunk", "pretrain:branch", "eval:other"]
    board.finish(board.ready()[0])
    assert [j.id for j in board.ready()] == ["pretrain:branch", "pretrain:cpt", "eval:other", "eval:trunk"]
    assert board.done_now == 1 and "pretrain:trunk" in board.done


def test_a_failure_skips_every_dependent_and_nothing_else(tmp_path):
    (tmp_path / "step-4").mkdir()
    board = Board(chain(tmp_path), done=set())
    board.fail(board.ready()[0], "RuntimeError: disk on fire")
    assert board.skipped == {"pretrain:branch", "pretrain:cpt", "eval:trunk", "eval:branch"}
    assert [j.id for j in board.pending] == ["eval:other"] and list(board.failed) == ["pretrain:trunk"]
    assert Board(chain(tmp_path), done={"pretrain:trunk"}).pending[0].id == "pretrain:branch"  # done: not redone


def test_in_process_execution_records_errors_and_stops_on_ctrl_c(tmp_path, monkeypatch):
    def execute(job, log=None, **progress):
        if job.id == "pretrain:trunk":
            raise RuntimeError("disk on fire")
        if job.id == "eval:other":
            raise KeyboardInterrupt
        return {"seconds": 0.0}

    monkeypatch.setattr(runner, "execute", execute)
    board = Board(chain(tmp_path), done=set())
    outcomes = runner._execute(board, workers=1)
    job, result, error = next(outcomes)
    assert job.id == "pretrain:trunk" and result is None
    assert error.splitlines()[0] == "RuntimeError: disk on fire" and "Traceback" in error
    board.fail(job, error)
    with pytest.raises(KeyboardInterrupt):  # the next ready job is eval:other
        next(outcomes)
