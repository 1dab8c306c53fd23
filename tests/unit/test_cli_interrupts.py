"""Ctrl-C on the command line: one line on stderr saying what stopped and what is kept, exit code 130. Typer turns
an interrupt into a silent 130; the long commands say what their next run reuses, any other says `interrupted`."""
from __future__ import annotations

import pytest

from conftest import run_command, write_classification_task
from encoderlab.finetuning import sweep as sweep_module


@pytest.fixture
def interrupted_sweep(monkeypatch):
    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", pressed)


def test_ctrl_c_in_a_sweep_says_the_finished_runs_are_kept(tmp_path, monkeypatch, capsys, interrupted_sweep):
    task = write_classification_task(tmp_path / "task")
    code, out, err = run_command(monkeypatch, capsys, "sweep", tmp_path / "model", task, "--out", tmp_path / "evals",
                                 home=tmp_path / "home")
    assert code == 130 and out == ""
    assert err.splitlines() == [f"· interrupted: the sweep into {tmp_path / 'evals'} stopped; the runs it finished "
                                "are kept (each record is written whole): the same command goes on from them"]


def test_ctrl_c_in_a_command_that_says_nothing_itself_is_still_said(tmp_path, monkeypatch, capsys,
                                                                    interrupted_sweep):
    task = write_classification_task(tmp_path / "task")
    code, out, err = run_command(monkeypatch, capsys, "finetune", tmp_path / "model", task, "--lr", "1e-3",
                                 "--out", tmp_path / "evals", home=tmp_path / "home")
    assert (code, out, err.splitlines()) == (130, "", ["interrupted"])
