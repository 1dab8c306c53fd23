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


def test_ctrl_c_in_a_forced_data_prepare_names_the_command_that_reuses_the_finished_steps(tmp_path, monkeypatch,
                                                                                            capsys):
    """With --force the same command rebuilds every step again: the one that goes on from them is without it."""
    from encoderlab.data import prepare as prepare_module

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "prepare", pressed)
    (tmp_path / "a.txt").write_text("some text\n\nmore text\n")
    (tmp_path / "out").mkdir()
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "a.txt", "--out", tmp_path / "out",
                                 "--force", home=tmp_path / "home")
    assert code == 130 and out == ""
    assert err.splitlines() == [f"· interrupted: data prepare into {tmp_path / 'out'} stopped; nothing half-written "
                                "was kept (the steps it finished are kept: the same command without --force goes on "
                                "from them)"]


def test_ctrl_c_in_a_fresh_demo_names_the_command_that_goes_on_from_the_finished_jobs(tmp_path, monkeypatch, capsys):
    """`demo --fresh` deletes the study's folder first: run again, it would delete the jobs it just finished."""
    from types import SimpleNamespace

    from encoderlab.cli import commands, study as study_cli
    from encoderlab.data import prepare as prepare_module
    from encoderlab.study import plan as plan_module, runner, spec as spec_module

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    root = tmp_path / "studies" / "demo"
    monkeypatch.setattr(spec_module, "load_study", lambda path: ({}, {}))
    monkeypatch.setattr(prepare_module, "prepare", lambda *a, **k: {})
    monkeypatch.setattr(commands, "render_prepare", lambda s: None)
    monkeypatch.setattr(plan_module, "build_plan", lambda spec, base: SimpleNamespace(root=root, summary=dict))
    monkeypatch.setattr(study_cli, "render_plan", lambda s: None)
    monkeypatch.setattr(runner, "run_study", pressed)
    code, out, err = run_command(monkeypatch, capsys, "demo", "--fresh", home=tmp_path / "home")
    assert code == 130 and out == ""
    assert err.splitlines() == [f"· interrupted: the study in {root} stopped; the jobs it finished are kept: the same "
                                "command without --fresh goes on from them"]
