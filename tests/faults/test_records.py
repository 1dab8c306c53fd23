"""Results belong to the weights that made them, and nothing is counted unchecked, through the user's commands.

Two runs with one name in two folders (other weights) swept into one `--out`: the second is refused in one line
naming the first, which owns the records' folder, and is evaluated into another `--out`; the same weights copied to a
third folder reuse their records, and the records of a model that is gone are replaced. A record overwritten by
another LR's record and a 0-byte record are never counted: the sweep names them and runs them again, a study's
"done" is false until they are, and a study report leaves them out and lists them.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from conftest import run_command
from runs import config

from encoderlab.core.config import validate
from encoderlab.core.io import write_json
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs.checkpoint import weights_digest
from encoderlab.study.jobs import EvalJob
from encoderlab.study.report import write_report

GRID = ["--set", "max_steps=1", "--set", "lrs=[0.001, 0.003]", "--set", "seeds=[0, 1]", "--engine", "sequential",
        "--workers", "1"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, packed_dir, classification_task):
    """`mlm` pretrained in a/ and in b/ with another seed (other weights), and a task."""
    out = tmp_path_factory.mktemp("records")
    for folder, seed in (("a", 0), ("b", 1)):
        cfg = validate(PretrainConfig, config(out / folder, packed_dir, "mlm", seed=seed), "test")
        Trainer(cfg, show_progress=False, log=lambda message: None).run()
    classification_task(out / "task")
    return out


def sweep(run, task, out, monkeypatch, capsys) -> tuple[dict, str]:
    code, stdout, stderr = run_command(monkeypatch, capsys, "sweep", run, task, "--out", out, *GRID, "--json")
    assert code == 0, stderr
    return json.loads(stdout), stderr


def test_one_run_name_in_two_folders_is_two_models(models, tmp_path, monkeypatch, capsys):
    task, out = models / "task" / "task.yaml", tmp_path / "evals"
    first, _ = sweep(models / "a" / "mlm", task, out, monkeypatch, capsys)
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, _, err = run_command(monkeypatch, capsys, "sweep", models / "b" / "mlm", task, "--out", out, *GRID)
    owner = (models / "a" / "mlm" / "checkpoints" / "step-0000006").resolve()  # the same tag: mlm-step-0000006
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"{out / first['tag']} holds the records of {owner}, another model filed under the same name" in err
    assert "pass another --out" in err and {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    shutil.copytree(out, tmp_path / "copied")  # records copied with a project: the original's, replaced here
    moved, _ = sweep(models / "b" / "mlm", task, tmp_path / "copied", monkeypatch, capsys)
    assert moved["runs_done_this_time"] == 4
    second, _ = sweep(models / "b" / "mlm", task, tmp_path / "evals-b", monkeypatch, capsys)
    assert first["tag"] == second["tag"] and first[records.WEIGHTS] != second[records.WEIGHTS]
    assert second["runs_done_this_time"] == 4
    shutil.copytree(models / "b" / "mlm", tmp_path / "c" / "mlm")  # the same weights in another folder
    again, _ = sweep(tmp_path / "c" / "mlm", task, tmp_path / "evals-b", monkeypatch, capsys)
    assert again["runs_done_this_time"] == 0 and again["tasks"] == second["tasks"]
    for path in files:  # the first model gone (pretrained again elsewhere): its records are replaced, said so
        if path.name.startswith("lr"):
            path.write_text(json.dumps({**json.loads(path.read_text()), "checkpoint": str(tmp_path / "gone")}))
    third, log = sweep(models / "b" / "mlm", task, out, monkeypatch, capsys)
    assert third["runs_done_this_time"] == 4 and "4 record(s) not used" in log and "was made from other weights" in log
    recs = records.load_all(out, second["tag"])
    assert len(recs) == 4 and {r[records.WEIGHTS] for r in recs} == {weights_digest(models / "b" / "mlm" /
                                                                                    "checkpoints" / "step-0000006")}


def test_a_foreign_or_empty_record_is_never_counted(models, tmp_path, monkeypatch, capsys):
    task, out = models / "task" / "task.yaml", tmp_path / "evals"
    summary, _ = sweep(models / "a" / "mlm", task, out, monkeypatch, capsys)
    [folder] = {p.parent for p in out.rglob("lr*.json")}
    protocol = Protocol.model_validate(json.loads((folder / "lr0.001-seed0.json").read_text())["protocol"])
    job = EvalJob(id="eval:a", checkpoint=models / "a" / "mlm" / "checkpoints" / "step-0000006", tasks=[str(task)],
                  out=out, protocol=protocol)
    assert job.is_done()
    assert not replace(job, checkpoint=models / "b" / "mlm" / "checkpoints" / "step-0000006").is_done()
    shutil.copy(folder / "lr0.001-seed0.json", folder / "lr0.003-seed0.json")  # another LR's record over this one
    (folder / "lr0.003-seed1.json").write_bytes(b"")
    found, unused = records.scan(out, summary["tag"])
    assert len(found) == 2 and not job.is_done()
    assert any("lr0.003-seed0.json: is another run's record: run lr0.001-seed0.json" in u for u in unused), unused
    assert any("lr0.003-seed1.json: does not read as a JSON record" in u for u in unused), unused
    again, log = sweep(models / "a" / "mlm", task, out, monkeypatch, capsys)
    assert again["runs_done_this_time"] == 2 and "2 record(s) not used, their runs are done again" in log
    assert records.scan(out, summary["tag"])[1] == [] and job.is_done()
    assert again["tasks"]["task"]["runs"] == 4


PROTOCOL = {"name": "t", "lrs": [0.001], "seeds": [0, 1, 2], "max_steps": 4}


def test_a_study_report_lists_an_empty_record_and_leaves_it_out(tmp_path):
    """The issue's case: seeds scoring 10, 50, 90 (50.0 +- 99.4) with the 90 record emptied used to give 30.0 and
    say nothing; it gives the two seeds left and lists the record and the short grid."""
    run = {"name": "m", "size": "micro", "kind": "model", "schedule": [["mlm40", 0]], "steps": 4, "init": None,
           "tokens_per_step": 64}
    write_json(tmp_path / "plan.json", {
        "study": "s", "budget": 4, "protocol": PROTOCOL, "runs": [run],
        "summary": {"steps": 4, "naive_steps": 4, "flops": 1.0, "naive_flops": 1.0},
        "evaluations": [{"label": "m", "model": "m", "step": 4, "kind": "final", "size": "micro", "tag": "m-tag"}]})
    key = records.protocol_key(PROTOCOL)
    for seed, score in enumerate((10.0, 50.0, 90.0)):
        records.write(records.record_path(tmp_path / "evals", "m-tag", key, "rt-polarity", "0" * 16, 0.001, seed), {
            "tag": "m-tag", "task": "rt-polarity", "family": "classification", "metric": "accuracy", "status": "ok",
            "fingerprint": "0" * 16, "protocol": PROTOCOL, "lr": 0.001, "seed": seed,
            "baseline": {s: {"score": 50.0} for s in ("validation", "test")},
            "scores": {"validation": {"score": score}, "test": {"score": score}}})
    emptied = records.record_path(tmp_path / "evals", "m-tag", key, "rt-polarity", "0" * 16, 0.001, 2)
    emptied.write_bytes(b"")
    text = write_report(tmp_path).read_text()
    missing = text.split("## Failed and missing runs")[1].split("##")[0]
    assert "m / rt-polarity: 2 of 3 runs recorded" in missing
    assert f"{emptied}: does not read as a JSON record" in missing
    assert "30.0" in text.split("## Per-dataset scores")[1]


@pytest.mark.parametrize("extra", [{}, {"baselines": "damaged", "constant_predictions": ["x"]},
                                   {"baselines": {"test": {"bm25": "93"}}, "constant_predictions": {"test": 1}}])
def test_records_without_or_with_damaged_baselines_are_summarised_with_dashes(extra):
    """Records from before the baselines (or with the fields damaged by hand): their trivial baseline and "-" for the
    rest, never a crash, never called constant."""
    from encoderlab.finetuning.aggregate import summarize
    from encoderlab.tasks import baselines

    recs = [{"task": "ir", "family": "retrieval", "metric": "ndcg@10", "status": "ok", "lr": 1e-3, "seed": seed,
             "scores": {"validation": {"score": 5.0}, "test": {"score": 5.0 + seed}},
             "baseline": {"test": {"score": 0.4}}, **extra} for seed in (0, 1)]
    [entry] = summarize(recs)["tasks"].values()
    assert entry["constant"] is None and entry["warning"] is None
    cells = [baselines.cell(entry, n) for n in baselines.columns("retrieval", [entry])]
    assert cells[1] in ("-", "n/a") and (cells[0] == "0.40" or not isinstance(extra.get("baselines"), dict))

