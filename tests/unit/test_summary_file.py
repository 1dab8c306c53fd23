"""summary.json's grid per task (finetuning/summary_file.py): the rules of one grid, applied to each task alone, and
the summaries written before entries named their grid read under their protocol's."""
from __future__ import annotations

import json

from encoderlab.finetuning.summary_file import summary_grids, task_grids

TWO, THREE, ONE = ([1e-3], [0, 1]), ([1e-3], [0, 1, 2]), ([1e-3], [0])
EVERY = [(1e-3, seed) for seed in range(6)]  # the runs a task's data now has records of, where it has them all


def summary(protocol: tuple[list, list], **grids: tuple[list, list] | None) -> dict:
    """A summary.json of these tasks: each with its own grid where given, none (as written before) where None."""
    return {"protocol": {"name": "t", "lrs": protocol[0], "seeds": protocol[1]},
            "tasks": {t: {"seeds": 1, **({"grid": {"lrs": g[0], "seeds": g[1]}} if g else {})}
                      for t, g in grids.items()}}


def test_a_summary_without_task_grids_gives_every_task_its_protocols_grid():
    assert task_grids(summary(THREE, a=None, b=TWO)) == {"a": THREE, "b": TWO}
    assert task_grids({"tasks": []}) == {} and task_grids(None) == {}


def test_each_task_keeps_its_own_held_grid(tmp_path):
    """A sweep of `b` over three seeds: `a`, not swept, keeps its two; `b`'s grid is the sweep's; a sweep of one run
    of `a` (`finetune`) keeps `a`'s held grid, inside it or not."""
    file = tmp_path / "summary.json"
    file.write_text(json.dumps(summary(TWO, a=TWO)))
    assert summary_grids(file, THREE, {"b": EVERY}, {"a": EVERY, "b": EVERY}) == {"a": TWO, "b": THREE}
    file.write_text(json.dumps(summary(THREE, a=TWO, b=THREE)))
    for run in (ONE, ([1e-3], [5])):
        assert summary_grids(file, run, {"a": EVERY}, {"a": EVERY, "b": EVERY}) == {"a": TWO, "b": THREE}


def test_a_key_1_summary_gives_its_grid_only_to_the_tasks_it_holds(tmp_path):
    """Before the key-2 summary holds a task, a key-1 folder's summary of it (written before task grids) is its
    earlier sweep; one of other tasks is not: a new task's one run is its own grid, not another task's sweep's."""
    file, old = tmp_path / "summary.json", tmp_path / "old.json"
    old.write_text(json.dumps(summary(TWO, b=None)))
    assert summary_grids(file, ONE, {"a": EVERY}, {"a": EVERY, "b": EVERY}, [old]) == {"a": ONE, "b": TWO}
    assert summary_grids(file, ONE, {"b": EVERY}, {"b": EVERY}, [old]) == {"b": TWO}


def test_a_grid_the_tasks_data_now_lacks_runs_of_is_not_kept(tmp_path):
    """`a`'s data edited after its sweep of seeds [0, 1]: its runs of the old data are filed under the old
    fingerprint, so a run of seed 0 (or 5) of the new data is written under its own grid, the held grid (or a key-1
    summary's) not kept; where the new data has both seeds recorded (0.001 written as 1e-3 or 0.001), it is."""
    file, old = tmp_path / "summary.json", tmp_path / "old.json"
    file.write_text(json.dumps(summary(TWO, a=TWO, b=TWO)))
    five = ([1e-3], [5])
    assert summary_grids(file, ONE, {"a": [(1e-3, 0)]}, {"a": EVERY, "b": EVERY}) == {"a": ONE, "b": TWO}
    assert summary_grids(file, five, {"a": [(1e-3, 5), (1e-3, 0)]}, {"a": EVERY, "b": EVERY}) == {"a": five, "b": TWO}
    assert summary_grids(file, ONE, {"a": [(0.001, 0), (1e-3, 1)]}, {"a": EVERY}) == {"a": TWO}
    old.write_text(json.dumps(summary(TWO, a=None)))
    assert summary_grids(tmp_path / "none.json", ONE, {"a": [(1e-3, 0)]}, {"a": EVERY}, [old]) == {"a": ONE}
    assert summary_grids(tmp_path / "none.json", ONE, {"a": EVERY}, {"a": EVERY}, [old]) == {"a": TWO}


def test_a_task_not_swept_that_the_file_does_not_hold_is_written_under_the_runs_it_has(tmp_path):
    """`a`'s sweep stopped before it wrote summary.json: a sweep of `b` writes `a` under the LRs and seeds `a` has
    records of, not under `b`'s grid (it never ran 1e-2); a grid the file holds for `a` is still kept."""
    file = tmp_path / "summary.json"
    runs = {"a": [(1e-3, 0), (1e-3, 1)], "b": [(1e-3, 0), (1e-2, 0)]}
    assert summary_grids(file, ([1e-3, 1e-2], [0]), {"b": runs["b"]}, runs) == {"a": TWO, "b": ([1e-3, 1e-2], [0])}
    file.write_text(json.dumps(summary(THREE, a=THREE)))
    assert summary_grids(file, ([1e-3, 1e-2], [0]), {"b": runs["b"]}, runs)["a"] == THREE
