"""Key algorithm 2 leaves the grid out of the protocol key: one folder holds every grid's runs of a protocol's settings,
its readers count only their own grid's, and the folders of key algorithm 1 (one per grid) are read with it, never
moved or rewritten; one run recorded in two of them counts once, and other results are named
(finetuning/migrate_keys.py)."""
from __future__ import annotations

import json

from encoderlab.core.io import write_json
from encoderlab.finetuning import migrate_protocol, records
from encoderlab.study.report import write_report
from encoderlab.study.results import StudyResults

TAG, TASK, FP = "m-tag", "rt-polarity", "0" * 16
SETTINGS = {"name": "t", "lrs": [0.001], "max_steps": 4}


def protocol(seeds: list[int]) -> dict:
    return {**SETTINGS, "seeds": seeds}


def record(seeds: list[int], seed: int, test: float, finished: str = "2026-01-01T00:00:00") -> dict:
    """A record as a sweep of grid `seeds` wrote it before formats had versions."""
    return {"tag": TAG, "task": TASK, "family": "classification", "metric": "accuracy", "status": "ok",
            "fingerprint": FP, "protocol": protocol(seeds), "lr": 0.001, "seed": seed, "finished": finished,
            "baseline": {s: {"score": 50.0} for s in ("validation", "test")},
            "scores": {"validation": {"score": test}, "test": {"score": test}}}


def filed(root, rec: dict, algorithm: int = migrate_protocol.KEY_ALGORITHM):
    key = migrate_protocol.key(rec["protocol"], algorithm)
    path = records.record_path(root, TAG, key, TASK, FP, rec["lr"], rec["seed"])
    records.write(path, rec)
    return path


def write_plan(root, seeds: list[int]) -> None:
    write_json(root / "plan.json", {
        "study": "s", "budget": 4, "protocol": protocol(seeds), "runs": [],
        "summary": {"steps": 4, "naive_steps": 4, "flops": 1.0, "naive_flops": 1.0},
        "evaluations": [{"label": "m", "model": "m", "step": 4, "kind": "final", "size": "micro", "tag": TAG}]})


def test_a_protocols_results_count_only_its_own_grid_of_the_runs_its_key_holds(tmp_path):
    """A 4th seed's record in the folder of a 3-seed protocol's key is not in its mean."""
    for seed, test in enumerate((10.0, 50.0, 90.0, 0.0)):  # seed 3 would pull the mean from 50 to 37.5
        filed(tmp_path / "evals", record([0, 1, 2, 3], seed, test))
    key = records.protocol_key(protocol([0, 1, 2]))
    assert key == records.protocol_key(protocol([0, 1, 2, 3])) == records.protocol_key(protocol([3]))
    assert len(records.load_all(tmp_path / "evals", TAG, key)) == 4  # every grid's runs are kept
    assert [r["seed"] for r in records.load_all(tmp_path / "evals", TAG, key, grid=([1e-3], [0, 1, 2]))] == [0, 1, 2]
    write_plan(tmp_path, [0, 1, 2])
    score = StudyResults(tmp_path).tasks["m"][TASK]
    assert score.test == 50.0 and score.runs == 3 and set(score.by_seed) == {0, 1, 2}
    write_plan(tmp_path, [0, 1, 2, 3])
    assert StudyResults(tmp_path).tasks["m"][TASK].test == 37.5


def test_key_1_folders_are_read_with_their_key_2_folder_and_one_run_counts_once(tmp_path):
    """A grid grown under key 1 (seeds 0-2, then 0-3) left two folders, each with seed 0; key 2 reads both as one:
    every run is done, seed 0 counts once (the newest of its two records), and its other result is named."""
    evals = tmp_path / "evals"
    old = [filed(evals, record([0, 1, 2], seed, test), 1) for seed, test in enumerate((10.0, 50.0, 90.0))]
    again = filed(evals, record([0, 1, 2, 3], 0, 20.0, "2026-02-01T00:00:00"), 1)  # the grown grid's seed 0
    same = filed(evals, record([0, 1, 2, 3], 1, 50.0, "2026-02-01T00:00:00"), 1)  # the same result: one measurement
    files = sorted(evals.rglob("*.json"))
    key = records.protocol_key(protocol([0, 1, 2]))
    assert old[0].parents[2].name != again.parents[2].name != key  # two key-1 folders, no key-2 folder yet
    assert [p.name for p in records.folders(evals, TAG, key)] == [key, *sorted({old[0].parents[2].name,
                                                                                again.parents[2].name})]
    for seed in (0, 1, 2):  # done for a sweep or a study job: nothing is run again
        assert records.recorded(evals, TAG, key, [(TASK, FP)], FP, 1e-3, seed, None) is not None
    assert records.recorded(evals, TAG, key, [(TASK, FP)], FP, 1e-3, 3, None) is None  # never recorded
    one = records.find(evals, TAG, key, TASK, FP, 1e-3, 0, None)
    assert one.path == again and one.record["scores"]["test"]["score"] == 20.0
    assert one.differing == [f"{old[0]}: the run of {again} recorded again under an older grid, with other results "
                             "(validation 10, test 10; used: validation 20, test 20): not counted, the newest, "
                             "finished 2026-02-01T00:00:00, is used (what the last sweep of it reported)"]
    assert records.find(evals, TAG, key, TASK, FP, 1e-3, 1, None).differing == []  # same results: nothing to say
    assert records.find(evals, TAG, key, TASK, FP, 1e-3, 1, None).path == same
    write_plan(tmp_path, [0, 1, 2])
    res = StudyResults(tmp_path)
    assert res.tasks["m"][TASK].by_seed == {0: 20.0, 1: 50.0, 2: 90.0} and res.unused == one.differing
    assert "not counted, the newest" in write_report(tmp_path).read_text()  # listed with the runs left out
    assert sorted(evals.rglob("*.json")) == files  # reading moved and rewrote nothing


def test_a_record_under_the_current_key_is_used_before_key_1_copies_of_its_run(tmp_path):
    evals = tmp_path / "evals"
    filed(evals, record([0, 1], 0, 30.0, "2026-03-01T00:00:00"), 1)
    current = filed(evals, record([0], 0, 40.0, "2026-01-01T00:00:00"))
    one = records.find(evals, TAG, records.protocol_key(protocol([0])), TASK, FP, 1e-3, 0, None)
    assert one.path == current and "the record filed under the current protocol key is used" in one.differing[0]


def test_a_key_1_folder_is_told_by_its_records_and_a_foreign_record_is_not_its_own(tmp_path):
    """Only folders whose records were filed by key 1 under these settings join the key: another protocol's (other
    steps) does not, and a record copied into a key-1 folder from another grid's is not of its place."""
    evals = tmp_path / "evals"
    filed(evals, record([0, 1], 0, 30.0), 1)
    other = {**record([0, 1], 1, 35.0), "protocol": {**protocol([0, 1]), "max_steps": 8}}
    filed(evals, other, 1)
    key = records.protocol_key(protocol([0]))
    assert len(records.folders(evals, TAG, key)) == 2
    moved = records.record_path(evals, TAG, migrate_protocol.key(protocol([0, 1]), 1), TASK, FP, 1e-3, 2)
    records.write(moved, record([0, 1, 2], 2, 1.0))  # a seed-2 record of the 3-seed key-1 folder, copied here
    assert records.find(evals, TAG, key, TASK, FP, 1e-3, 2, None).record is None
    assert "is another run's record: protocol key" in records.usable(moved, None)[1]
    assert json.loads(moved.read_text())["seed"] == 2


def test_a_model_saved_under_key_1_is_its_run_and_not_trained_again(tmp_path):
    """`--save-models`/`--save` under key algorithm 1 named the run by its key-1 key: the same run under key 2 finds
    it saved; another run, or a key 1 of other settings, does not."""
    from encoderlab.hub.finetuned import MANIFEST, SavedModels

    old = protocol([0, 1])
    identity = {records.WEIGHTS: "a" * 64, "protocol_key": records.protocol_key(old), "trained_on": FP, "lr": 1e-3,
                "seed": 0}
    saver = SavedModels("all", tmp_path / "models", tmp_path / "m" / "checkpoints" / "step-4")
    folder = saver.folder(TASK, identity)
    folder.mkdir(parents=True)
    stored = {**identity, "protocol_key": migrate_protocol.key(old, 1)}
    (folder / MANIFEST).write_text(json.dumps({"identity": stored, "records": {TASK: record([0, 1], 0, 30.0)}}))
    assert saver.saved(TASK, identity)
    assert not saver.saved(TASK, {**identity, records.WEIGHTS: "b" * 64})
    assert not saver.saved(TASK, {**identity, "protocol_key": records.protocol_key({**old, "max_steps": 8})})
    (folder / MANIFEST).write_text(json.dumps({"identity": {**stored, "protocol_key": "t-00000000"},
                                               "records": {TASK: record([0, 1], 0, 30.0)}}))
    assert not saver.saved(TASK, identity)
