"""summary.json after a task's data changed: a task's entry counts the records of its data now under a grid all of
whose runs that data has, never a larger grid held from the data before (finetuning/summary_file.py)."""
from __future__ import annotations

import json

import pytest
from test_sweep import protocol, task_yaml, tiny_checkpoint  # noqa: F401 - fixtures

from encoderlab import api
from encoderlab.finetuning.sweep import run_sweep


def _edit_one_example(task_file, row: int) -> None:
    """Flip one training example's label: the task's fingerprint changes, its records go to another folder."""
    train = task_file.with_name("train.jsonl")
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    rows[row]["label"] = "neg" if rows[row]["label"] == "pos" else "pos"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_run_after_the_data_changed_does_not_keep_the_grid_of_the_old_data(tmp_path, tiny_checkpoint,  # noqa: F811
                                                                             task_yaml):  # noqa: F811
    """Seeds [0, 1] swept; one example edited; `finetune` of seed 0 (inside the held grid) then, after another edit,
    of seed 5 (outside it): each time summary.json and the card name the run's own grid and count its one record,
    not seeds 0, 1 of which the new data has one run (or none, the task then missing from the file)."""
    from encoderlab.hub.card import evaluation_lines, evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    swept = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    file = out / swept["tag"] / swept["protocol_key"] / "summary.json"
    settings = tmp_path / "protocol.yaml"
    settings.write_text(json.dumps(protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1]).model_dump(mode="json")))
    for row, seed in ((0, 0), (1, 5)):
        _edit_one_example(task_yaml, row)
        one = api.finetune(tiny_checkpoint, task_yaml, lr=1e-3, seed=seed, protocol=settings, out=out,
                           log=lambda m: None)
        assert one["runs_done_this_time"] == 1
        entry = json.loads(file.read_text())["tasks"]["task"]
        assert entry["grid"] == {"lrs": [1e-3], "seeds": [seed]} and entry["runs"] == 1
        assert list(entry["test_by_seed"]) == [str(seed)] and round(entry["test"], 3) == one["tasks"]["task"]["test"]
        (card,) = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out)
        assert f"LRs 0.001 x seeds {seed} (" in "\n".join(evaluation_lines([card]))


def test_a_grid_the_data_now_fills_is_kept_by_a_run_of_it(tmp_path, tiny_checkpoint, task_yaml):  # noqa: F811
    """Seeds [0, 1] swept, then again on edited data, then the data restored byte for byte: a run of seed 0 keeps
    the held grid, which the restored data has every run of, and counts the restored data's records."""
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    two, one = (protocol(max_steps=2, lrs=[1e-3], seeds=s) for s in ([0, 1], [0]))
    swept = run_sweep(tiny_checkpoint, [str(task_yaml)], two, out, **quiet)
    train = task_yaml.with_name("train.jsonl")
    original = train.read_bytes()
    _edit_one_example(task_yaml, 0)
    assert run_sweep(tiny_checkpoint, [str(task_yaml)], two, out, **quiet)["runs_done_this_time"] == 2
    train.write_bytes(original)
    assert run_sweep(tiny_checkpoint, [str(task_yaml)], one, out, **quiet)["runs_done_this_time"] == 0
    entry = json.loads((out / swept["tag"] / swept["protocol_key"] / "summary.json").read_text())["tasks"]["task"]
    assert entry["grid"] == {"lrs": [1e-3], "seeds": [0, 1]} and entry["runs"] == 2
    assert entry["test_by_seed"] == {str(s): t for s, t in swept["tasks"]["task"]["test_by_seed"].items()}


def test_a_task_not_swept_and_not_in_the_file_is_written_under_the_runs_it_has(tmp_path, tiny_checkpoint,  # noqa: F811
                                                                                task_yaml, monkeypatch):  # noqa: F811
    """`task`'s sweep of LRs 1e-3, 3e-3 stopped (Ctrl-C) after its first run, before summary.json; a sweep of
    `other` over LRs 1e-3, 5e-3 then writes the file: `task`, which it does not sweep, is counted under the LR and
    seed it has a record of, not under `other`'s grid, whose 5e-3 it never ran."""
    from encoderlab.finetuning import sweep as sweep_module

    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    other = task_yaml.with_name("other.yaml")
    other.write_text(task_yaml.read_text())
    real, calls = sweep_module.finetune, []

    def stopped_at_the_second_run(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "finetune", stopped_at_the_second_run)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(max_steps=2, lrs=[1e-3, 3e-3], seeds=[0]), out, **quiet)
    monkeypatch.setattr(sweep_module, "finetune", real)
    swept = run_sweep(tiny_checkpoint, [str(other)], protocol(max_steps=2, lrs=[1e-3, 5e-3], seeds=[0]), out, **quiet)
    tasks = json.loads((out / swept["tag"] / swept["protocol_key"] / "summary.json").read_text())["tasks"]
    assert tasks["other"]["grid"] == {"lrs": [1e-3, 5e-3], "seeds": [0]} and tasks["other"]["runs"] == 2
    assert tasks["task"]["grid"] == {"lrs": [1e-3], "seeds": [0]} and tasks["task"]["runs"] == 1
    assert tasks["task"]["validation_by_lr"].keys() == {"0.001"}
