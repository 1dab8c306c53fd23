"""A study of models that exist already (`checkpoints:`): no pretraining planned, one sweep per model and task,
records keyed by the weights, and the report's comparison of the two."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_study import scores, task_yaml  # noqa: F401 - task_yaml is a fixture

from encoderlab.core.config import ConfigError, validate
from encoderlab.finetuning import records
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.study.jobs import jobs_of
from encoderlab.study.plan import build_plan
from encoderlab.study.report import write_report
from encoderlab.study.runner import run_study
from encoderlab.study.spec import load_study


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, packed_dir) -> tuple[Path, Path]:
    """Two 2-step micro runs with different seeds: a run folder each."""
    out = tmp_path_factory.mktemp("runs")
    for name, seed in (("a", 0), ("b", 1)):
        cfg = validate(PretrainConfig, {
            "name": name, "out_dir": str(out), "data": {"path": str(packed_dir)},
            "model": {"preset": "micro", "num_hidden_layers": 1}, "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
            "train": {"steps": 2, "global_batch": 2, "dtype": "fp32", "tensorboard": False, "seed": seed}}, "test")
        Trainer(cfg, show_progress=False, log=lambda m: None).run()
    return out / "a", out / "b"


def write_study(tmp_path: Path, task: Path, checkpoints: dict) -> Path:
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 3, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0, 1, 2],
        "max_length": 32, "dtype": "fp32"}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "existing", "out_dir": str(tmp_path / "studies"), "checkpoints": checkpoints,
        "evaluation": {"protocol": "protocol.yaml", "tasks": [str(task)]}}))
    return tmp_path / "study.yaml"


def test_a_study_of_two_existing_checkpoints_trains_nothing_and_compares_them(tmp_path, two_runs, task_yaml,  # noqa: F811
                                                                               one_thread, capsys, monkeypatch):
    from encoderlab.cli.console import out
    from encoderlab.cli.study import render_plan

    run_a, run_b = two_runs
    ckpt_b = run_b / "checkpoints" / "step-0000001"  # any checkpoint, not only a run's latest
    spec, base = load_study(write_study(tmp_path, task_yaml, {"a": str(run_a), "b": str(ckpt_b)}))
    plan = build_plan(spec, base)
    assert plan.runs == {} and plan.summary()["steps"] == 0
    monkeypatch.setattr(out, "width", 300)  # one line, however long
    render_plan(plan.summary())  # `study plan`: no empty table of pretraining runs, one line saying there is none
    printed = capsys.readouterr().out
    assert "pretraining runs" not in printed and "┃" not in printed, printed
    assert "pretraining none: the study evaluates existing models only" in printed
    assert {e.label: (e.kind, e.path) for e in plan.evaluations} == {
        "a": ("checkpoint", (run_a / "checkpoints" / "step-0000002").resolve()), "b": ("checkpoint", ckpt_b)}
    jobs = jobs_of(plan)
    assert [(j.kind, j.deps) for j in jobs] == [("eval", []), ("eval", [])]
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and result["done"] == 2
    assert not (plan.root / "pretrain").exists()
    assert len(scores(plan.root)) == 2 * 3  # two models x 1 LR x 3 seeds, each under its own records folder
    again = run_study(build_plan(spec, base), base, log=lambda m: None)
    assert again["done_now"] == 0  # the records of these weights are found again
    text = write_report(plan.root).read_text()
    assert "five findings" not in text and "## Pairwise comparisons" in text
    pair = text.split("**A = a, B = b**: ")[1].split("\n")[0]
    # neither checkpoint learned enough to pass TF-IDF + LR: the pair's line says so
    assert pair.endswith("of 1 category; against the strongest baseline (TF-IDF + LR) in SC: no model beats it.")
    assert "| SC |" in text.split("**A = a, B = b**")[1], pair
    cats = (plan.root / "report" / "categories.csv").read_text().splitlines()
    assert cats[0] == "model,SC" and [c.split(",")[0] for c in cats[1:]] == ["a", "b"]
    assert json.loads((plan.root / "plan.json").read_text())["runs"] == []


def test_two_checkpoints_whose_records_would_share_a_folder_are_refused(tmp_path, two_runs, task_yaml):  # noqa: F811
    run_a, _ = two_runs
    study = write_study(tmp_path, task_yaml, {"a": str(run_a), "again": str(run_a)})
    with pytest.raises(ConfigError, match="checkpoints.again has the records folder a-step-0000002 of a"):
        build_plan(*load_study(study))


def test_a_transformers_folder_is_imported_once_and_evaluated(tmp_path, tmp_path_factory, synthetic, two_runs,
                                                              task_yaml, one_thread):  # noqa: F811
    from test_study_imported import llama_dir

    hf = llama_dir.__wrapped__(tmp_path_factory, synthetic)
    spec, base = load_study(write_study(tmp_path, task_yaml, {"hf": str(hf), "a": str(two_runs[0])}))
    plan = build_plan(spec, base)
    hf_eval = next(e for e in plan.evaluations if e.label == "hf")
    assert plan.eval_checkpoint(hf_eval) == plan.root / "checkpoints" / "hf"  # imported at run time
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and (plan.root / "checkpoints" / "hf" / "state.json").exists()
    assert {tag for tag, *_ in scores(plan.root)} == {"existing-hf", "a-step-0000002"}


def test_a_transformers_encoder_beside_an_encoderlab_checkpoint_in_one_study(tmp_path, two_runs, task_yaml,  # noqa: F811
                                                                              one_thread):
    """A BERT folder in `checkpoints:` is evaluated as it is (no import), under the same protocol, into the same
    report as an encoderlab run; its records are those of its files (weights, config, tokenizer)."""
    from test_transformers_encoders import write_encoder

    from encoderlab.runs.encoders import encoder_digest

    bert = write_encoder(tmp_path / "bert", "bert")
    spec, base = load_study(write_study(tmp_path, task_yaml, {"ours": str(two_runs[0]), "bert": str(bert)}))
    plan = build_plan(spec, base)
    assert {e.label: e.path for e in plan.evaluations}["bert"] == bert.resolve()
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and result["done"] == 2
    assert not (plan.root / "checkpoints" / "bert").exists()  # not imported
    assert len(scores(plan.root)) == 2 * 3
    weights = {r[records.WEIGHTS] for r in records.load_all(plan.root / "evals")}
    assert encoder_digest(bert) in weights and len(weights) == 2  # its weights, config and tokenizer
    text = write_report(plan.root).read_text()
    assert "**A = ours, B = bert**" in text or "**A = bert, B = ours**" in text


def test_a_study_refuses_a_transformers_folder_it_cannot_evaluate_when_planned(tmp_path, task_yaml):  # noqa: F811
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10, "hidden_size": 8,
                                                    "num_hidden_layers": 1, "num_attention_heads": 2}))
    spec, base = load_study(write_study(tmp_path, task_yaml, {"odd": str(folder)}))
    with pytest.raises(ConfigError, match=r"checkpoints.odd: .*holds no model.safetensors"):
        build_plan(spec, base)


def test_a_task_dropped_from_the_study_file_leaves_the_report(tmp_path, two_runs, task_yaml, one_thread):  # noqa: F811
    """The records of a task the study no longer lists stay on disk, but its scores leave every table and mean."""
    other = tmp_path / "other.yaml"
    other.write_text(task_yaml.read_text())  # the same data under another name: its own records
    study = write_study(tmp_path, task_yaml, {"a": str(two_runs[0])})
    both = yaml.safe_load(study.read_text())
    both["evaluation"]["tasks"].append(str(other))
    study.write_text(yaml.safe_dump(both))
    plan = build_plan(*load_study(study))
    assert not run_study(plan, plan.root.parent, log=lambda m: None)["failed"]
    assert {task for _, task, *_ in scores(plan.root)} == {"task", "other"}
    study = write_study(tmp_path, task_yaml, {"a": str(two_runs[0])})  # `other` dropped
    spec, base = load_study(study)
    assert run_study(build_plan(spec, base), base, log=lambda m: None)["done_now"] == 0
    text = write_report(plan.root).read_text()
    datasets = (plan.root / "report" / "datasets.csv").read_text()
    assert "task" in datasets and "other" not in datasets
    assert "- a / other: records of a task the study file no longer evaluates there (not counted)" in text


def test_records_of_a_tasks_old_data_leave_the_report(tmp_path, two_runs, task_yaml, one_thread):  # noqa: F811
    """A task file's data edited since its runs: the report showed the old data's scores as the task's."""
    study = write_study(tmp_path, task_yaml, {"a": str(two_runs[0])})
    plan = build_plan(*load_study(study))
    assert not run_study(plan, plan.root.parent, log=lambda m: None)["failed"]
    assert "| a |" in write_report(plan.root).read_text()
    test = tmp_path / "test.jsonl"
    rows = test.read_text().splitlines()
    test.write_text("\n".join(rows[1:] + rows[:1]) + "\n")  # the same examples in another order: other data
    text = write_report(plan.root).read_text()
    assert "- a / task: records of other data than the task's files hold now (not counted; `study run` does them " \
           "again)" in text
    assert "task" not in (plan.root / "report" / "datasets.csv").read_text().split("\n", 1)[1]
    spec, base = load_study(study)
    assert run_study(build_plan(spec, base), base, log=lambda m: None)["done_now"] == 1
    assert "records of other data" not in write_report(plan.root).read_text()


def test_records_of_a_tasks_restored_data_count_again(tmp_path, two_runs, task_yaml, one_thread):  # noqa: F811
    """A task file's data edited, run again, then restored byte for byte: its first records are of the data there
    now and count again, though the edited data's records were made last."""
    study = write_study(tmp_path, task_yaml, {"a": str(two_runs[0])})
    plan = build_plan(*load_study(study))
    assert not run_study(plan, plan.root.parent, log=lambda m: None)["failed"]
    write_report(plan.root)
    datasets = (plan.root / "report" / "datasets.csv").read_text()
    test = tmp_path / "test.jsonl"
    original = test.read_bytes()
    rows = test.read_text().splitlines()
    test.write_text("\n".join(rows[1:] + rows[:1]) + "\n")  # other data, run: its records are the newest
    spec, base = load_study(study)
    assert run_study(build_plan(spec, base), base, log=lambda m: None)["done_now"] == 1
    test.write_bytes(original)
    spec, base = load_study(study)
    assert run_study(build_plan(spec, base), base, log=lambda m: None)["done_now"] == 0  # its records are found
    text = write_report(plan.root).read_text()
    assert "records of other data" not in text
    assert (plan.root / "report" / "datasets.csv").read_text() == datasets


def test_a_moved_study_reports_what_it_reported_before(tmp_path, tmp_path_factory, synthetic, two_runs,  # noqa: F811
                                                       task_yaml, one_thread):  # noqa: F811
    """`mv studies/existing studies/existing-old`: the study's own copy of an imported model moved with it, and its
    records are checked against that copy, not against whatever model is at the old place now (the study run again
    there with another model), which hid them from the moved study's report."""
    import shutil

    from test_study_imported import llama_dir

    hf = llama_dir.__wrapped__(tmp_path_factory, synthetic)
    plan = build_plan(*load_study(write_study(tmp_path, task_yaml, {"hf": str(hf), "a": str(two_runs[0])})))
    assert not run_study(plan, plan.root.parent, log=lambda m: None)["failed"]

    def report(root: Path) -> list[str]:
        text = write_report(root).read_text().split("\n")
        return [*text[:2], *text[3:]] + [(root / "report" / f).read_text() for f in ("datasets.csv", "categories.csv")]

    before = report(plan.root)
    assert {row.split(",")[0] for row in before[-2].splitlines()[1:]} == {"a", "hf"}  # the import has its scores
    moved = plan.root.with_name("existing-old")
    shutil.move(plan.root, moved)
    assert report(moved) == before
    (plan.root / "checkpoints").mkdir(parents=True)  # another model where the study's copy was
    shutil.copytree(two_runs[1] / "checkpoints" / "step-0000002", plan.root / "checkpoints" / "hf")
    assert report(moved) == before
