"""Studies: the planner shares trunks, a killed study resumes to the same records, the report renders."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml

from encoderlab.core.config import ConfigError
from encoderlab.finetuning import records
from encoderlab.runs import checkpoint
from encoderlab.study import runner as runner_module
from encoderlab.study import scheduler
from encoderlab.study.plan import build_plan
from encoderlab.study.report import write_report
from encoderlab.study.runner import run_study
from encoderlab.study.spec import load_study

MICRO = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1}


def write_study(tmp_path: Path, data_path: str, task: str = "rt-polarity", **spec) -> Path:
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": data_path}, "model": {"preset": "micro", **MICRO}, "optim": {"lr": 3e-3},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 4, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3, 3e-3], "seeds": [0, 1],
        "max_length": 32, "dtype": "fp32"}))
    body = {"name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 20,
            "models": [{"sizes": ["micro"], "objectives": ["clm", "mlm40"]}],
            "evaluation": {"protocol": "protocol.yaml", "tasks": [task]},
            "data_shape": {"vocab_size": 320, "seq_len": 64}, **spec}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(body))
    return tmp_path / "study.yaml"


def plan_of(path: Path):
    spec, base = load_study(path)
    return build_plan(spec, base), base


# ------------------------------------------------------------------------------------------------ planner


def test_budgets_and_splits_branch_off_shared_trunks(tmp_path):
    study = write_study(tmp_path, "nowhere", splits={"sizes": ["micro"], "shares": [0, 25, 50, 100],
                                                     "budgets": [12, 20]},
                        intermediate={"steps": [4, 8]}, cpt={"sizes": ["micro"], "sources": ["clm", "mlm40"],
                                                             "steps": [6, 10],
                                                             "lr_schedule": {"warmup_steps": 1, "decay_steps": 2}},
                        random_init=["micro"])
    plan, base = plan_of(study)
    runs = plan.runs
    # 0% and 100% splits at the full budget are the MLM and CLM models themselves, not new runs
    assert "micro-clm-20" in runs and "micro-mlm40-20" in runs and "micro-clm-0-mlm40-20" not in runs
    # stable span = budget - decay: 25% of 16 = switch at 4, of 8 (budget 12) = 2
    assert runs["micro-clm-4-mlm40-20"].schedule == [("clm", 0), ("mlm40", 4)]
    assert runs["micro-clm-4-mlm40-20"].split_shares == {"clm-mlm40": 25.0}
    assert (runs["micro-clm-4-mlm40-20"].parent, runs["micro-clm-4-mlm40-20"].branch_step) == ("micro-clm-20", 4)
    # a shorter budget branches at its own decay start from the run that trains that step
    assert (runs["micro-mlm40-12"].parent, runs["micro-mlm40-12"].branch_step) == ("micro-mlm40-20", 8)
    assert (runs["micro-clm-12"].parent, runs["micro-clm-12"].branch_step) == ("micro-clm-20", 8)
    assert (runs["micro-clm-4-mlm40-12"].parent, runs["micro-clm-4-mlm40-12"].branch_step) == \
        ("micro-clm-4-mlm40-20", 8)
    assert 2 in runs["micro-clm-20"].save_at and 8 in runs["micro-clm-20"].save_at
    # CPT arms start from the decayed models' weights and share their own trunk
    long, short = runs["micro-clm-dec20-mlm40-30"], runs["micro-clm-dec20-mlm40-26"]
    assert long.init == "micro-clm-20" and long.parent is None
    assert (short.parent, short.branch_step) == (long.name, 4)
    # what was trained equals the union of the schedules' prefixes: well below training each model alone
    s = plan.summary()
    assert s["steps"] == sum(r.steps - r.branch_step for r in runs.values()) < s["naive_steps"]
    assert s["naive_steps"] == sum(r.steps for r in runs.values())
    assert 0 < s["flops"] < s["naive_flops"]
    labels = {e.label: e for e in plan.evaluations}
    assert labels["micro-clm-20-4"].run == "micro-clm-20" and labels["micro-random"].kind == "random"
    order = [r.name for r in plan.order()]
    assert all(order.index(r.parent) < order.index(r.name) for r in runs.values() if r.parent)
    assert all(order.index(r.init) < order.index(r.name) for r in runs.values() if r.init)
    jobs = runner_module.jobs_of(plan)  # the runner skips a failed job's dependents in one pass over this
    ids = [j.id for j in jobs]
    assert all(ids.index(d.partition("@")[0]) < ids.index(j.id) for j in jobs for d in j.deps)


def test_the_random_init_baseline_runs_its_own_tasks_or_the_intermediates(tmp_path):
    tasks = {e: {"protocol": "protocol.yaml", "tasks": ["rt-polarity", "conll-pos", "wiki-title"],
                 "intermediate_tasks": ["rt-polarity"], **extra}
             for e, extra in (("default", {}), ("own", {"random_init_tasks": ["rt-polarity", "conll-pos"]}))}
    for name, evaluation in tasks.items():
        (tmp_path / name).mkdir()
        plan, _ = plan_of(write_study(tmp_path / name, "nowhere", random_init=["micro"], evaluation=evaluation,
                                      intermediate={"steps": [4]}))
        by_kind = {e.kind: e.tasks for e in plan.evaluations}
        assert by_kind["intermediate"] == ["rt-polarity"]
        assert by_kind["random"] == evaluation.get("random_init_tasks", ["rt-polarity"])


def test_explicit_switch_steps_name_the_models_and_share_trunks(tmp_path):
    """Switches named per budget (the paper's released models follow no one share rule); several split groups."""
    study = write_study(tmp_path, "nowhere", splits=[
        {"sizes": ["micro"], "switch_steps": {20: [0, 3, 9, 20], 12: [0, 5, 12]}},
        {"sizes": ["micro"], "first": "clm", "then": "mlm20", "switch_steps": {20: [16]}}])
    runs = plan_of(study)[0].runs
    assert sorted(runs) == sorted(["micro-clm-20", "micro-mlm40-20", "micro-clm-3-mlm40-20", "micro-clm-9-mlm40-20",
                                   "micro-mlm40-12", "micro-clm-5-mlm40-12", "micro-clm-12", "micro-clm-16-mlm20-20"])
    assert runs["micro-clm-9-mlm40-20"].schedule == [("clm", 0), ("mlm40", 9)]
    assert (runs["micro-clm-9-mlm40-20"].parent, runs["micro-clm-9-mlm40-20"].branch_step) == ("micro-clm-20", 9)
    # MLM only in the decay: a branch of the CLM trunk at its decay start
    assert (runs["micro-clm-16-mlm20-20"].parent, runs["micro-clm-16-mlm20-20"].branch_step) == ("micro-clm-20", 16)
    assert runs["micro-clm-3-mlm40-20"].split_shares == {"clm-mlm40": 15.0}
    assert runs["micro-clm-20"].split_shares == {"clm-mlm40": 100.0}
    assert runs["micro-clm-16-mlm20-20"].split_shares == {"clm-mlm20": 80.0}
    for bad, match in (({"shares": [50], "budgets": [20], "switch_steps": {20: [5]}}, "either shares"),
                       ({"switch_steps": {20: [5]}, "budgets": [20]}, "drop budgets"),
                       ({"switch_steps": {20: [5]}, "share_of": "total"}, "drop budgets and share_of"),
                       ({"switch_steps": {20: [25]}}, r"within \[0, budget\]"),
                       ({"shares": [50]}, "shares and budgets")):
        study = write_study(tmp_path, "nowhere", splits={"sizes": ["micro"], **bad})
        with pytest.raises(ConfigError, match=match):
            plan_of(study)


def test_the_plan_reads_the_prepared_size_and_says_so(tmp_path, packed_dir):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    shape = plan_of(write_study(tmp_path / "a", "nowhere"))[0].summary()["data"]
    assert shape == {"from": "data_shape", "path": "nowhere", "vocab_size": 320, "seq_len": 64}
    meta = json.loads((packed_dir / "meta.json").read_text())
    prepared = plan_of(write_study(tmp_path / "b", str(packed_dir)))[0].summary()["data"]
    assert prepared["from"] == "prepared" and prepared["train_tokens"] == meta["splits"]["train"]["tokens"]
    assert prepared["longest_run_tokens"] == 20 * 4 * 64  # budget x global batch x window
    assert prepared["epochs"] == float(f"{20 * 4 * 64 / meta['splits']['train']['tokens']:.3g}") > 0


def test_size_overrides_of_a_size_the_study_does_not_train_are_refused(tmp_path):
    """They were ignored without a word: a misspelt size (`mirco`) planned and ran with the base recipe."""
    study = write_study(tmp_path, "nowhere", size_overrides={"mirco": {"optim": {"lr": 1e-3}}})
    with pytest.raises(ConfigError, match=r"study.yaml: size_overrides\.mirco: the study trains no model of size "
                                          r"'mirco' \(its sizes: micro\), so these overrides would be ignored$"):
        load_study(study)


def test_a_model_vocabulary_smaller_than_the_datas_is_refused_when_planned(tmp_path):
    """It planned, then every pretraining job failed once it read the data and each random-init evaluation with an
    IndexError (its embeddings fewer than the task's token ids)."""
    study = write_study(tmp_path, "nowhere", size_overrides={"micro": {"model": {"vocab_size": 100}}},
                        random_init=["micro"])
    with pytest.raises(ConfigError, match=r"study.yaml: size_overrides\.micro: model\.vocab_size: 100 is fewer than "
                                          r"the data's 320 tokens"):
        plan_of(study)


def test_bad_study_files_are_clear(tmp_path):
    study = write_study(tmp_path, "nowhere", models=[{"sizes": ["huge"], "objectives": ["mlm40"]}])
    with pytest.raises(ConfigError, match="unknown model size 'huge'"):
        plan_of(study)
    study = write_study(tmp_path, "nowhere", models=[{"sizes": ["micro"], "objectives": ["mlm140"]}])
    with pytest.raises(ConfigError, match="mlm140"):
        plan_of(study)
    for steps in ([50], [20]):  # the budget's step is the final model, which an intermediate used to drop silently
        study = write_study(tmp_path, "nowhere", intermediate={"steps": steps})
        with pytest.raises(ConfigError, match=rf"intermediate\.steps \[{steps[0]}\] must lie between 0 and the "
                           r"budget \(20\), both excluded"):
            plan_of(study)
    study = write_study(tmp_path, "nowhere", intermediate={"steps": [8, 16, 18]})  # decay: steps 16-20
    with pytest.raises(ConfigError, match=r"intermediate.steps \[18\] fall inside micro-clm-20's LR decay \(steps "
                       r"16-20\): .*give steps up to 16"):
        plan_of(study)
    study = write_study(tmp_path, "nowhere", pretrain="no-such.yaml")
    with pytest.raises(ConfigError, match=r"^study s: pretrain: config file not found: .*no-such\.yaml$"):
        plan_of(study)
    (tmp_path / "published.yaml").write_text("categories:\n  micro-mlm40-20: {SC: 80}\n  micro-mlm-20: {SC: 1}\n")
    study = write_study(tmp_path, "nowhere", paper_results=str(tmp_path / "published.yaml"))
    with pytest.raises(ConfigError, match=r"micro-mlm-20 name no evaluated model of study s \(allowed: "
                       r"micro-clm-20, micro-mlm40-20\)"):
        plan_of(study)
    body = yaml.safe_load(study.read_text())
    body.pop("data_shape")
    body["intermediate"] = None
    study.write_text(yaml.safe_dump(body))
    with pytest.raises(ConfigError, match="not prepared"):
        plan_of(study)


def test_a_file_that_is_not_a_study_is_named_so(tmp_path):
    (tmp_path / "published.yaml").write_text("source: x\ncategories:\n  m: {SC: 80}\n")
    with pytest.raises(ConfigError, match=r"published\.yaml is not a study file: .*this file holds source, "
                       r"categories$"):
        load_study(tmp_path / "published.yaml")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match=r"study file \S+/empty\.yaml is empty: it holds no setting; write its "
                       r"settings: a study names `name`, `evaluation` and .*\(docs/studies\.md\)$"):
        load_study(tmp_path / "empty.yaml")


def test_a_study_finds_its_task_files_beside_it_not_in_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "study").mkdir()
    study = write_study(tmp_path / "study", "nowhere", task="tasks/mine.yaml",
                        intermediate={"steps": [8]}, random_init=["micro"],
                        evaluation={"protocol": "protocol.yaml", "tasks": ["tasks/mine.yaml", "squad=copies/squad",
                                                                           "rt-polarity"],
                                    "intermediate_tasks": ["tasks/mine.yaml"], "random_init_tasks": ["~/t.yml"]})
    (tmp_path / "study" / "copies" / "squad").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    spec, base = load_study(study)
    assert base == (tmp_path / "study").resolve()
    assert spec.evaluation.tasks == [str(base / "tasks/mine.yaml"), f"squad={base / 'copies/squad'}", "rt-polarity"]
    assert spec.evaluation.intermediate_tasks == [str(base / "tasks/mine.yaml")]
    assert spec.evaluation.random_init_tasks == [str(Path("~/t.yml").expanduser())]


def test_a_study_passes_a_paper_datasets_hub_id_on_as_written(tmp_path, monkeypatch):
    """`squad_v2=rajpurkar/squad_v2` is a Hub id, not a folder beside the study file; a source written as a path,
    or one that exists beside the study file, is a local copy (the rule the loaders use)."""
    (tmp_path / "study" / "copies" / "qed").mkdir(parents=True)
    tasks = ["squad_v2=rajpurkar/squad_v2", "squad=rajpurkar/squad:plain_text", "qed=copies/qed", "record=./r",
             "nq=../nq", "msmarco=/data/msmarco"]
    study = write_study(tmp_path / "study", "nowhere", evaluation={"protocol": "protocol.yaml", "tasks": tasks})
    monkeypatch.chdir(tmp_path)
    spec, base = load_study(study)
    assert spec.evaluation.tasks == ["squad_v2=rajpurkar/squad_v2", "squad=rajpurkar/squad:plain_text",
                                     f"qed={base / 'copies/qed'}", f"record={base / 'r'}", f"nq={base / '../nq'}",
                                     "msmarco=/data/msmarco"]


# ------------------------------------------------------------------------------------------------ running


@pytest.fixture
def task_yaml(tmp_path):
    rng = random.Random(0)
    words = "the film was very quite rather plot actors story".split()
    for split, n in (("train", 48), ("dev", 16), ("test", 16)):
        rows = []
        for _ in range(n):
            label = rng.randint(0, 1)
            rows.append({"text": " ".join(rng.choices(words, k=4) + ["good" if label else "bad"]),
                         "label": "pos" if label else "neg"})
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "task.yaml").write_text("family: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\n"
                                        "test: test.jsonl\ntext_column: text\nlabel_column: label\n")
    return tmp_path / "task.yaml"


def scores(root: Path) -> dict:
    return {(r["tag"], r["task"], r["lr"], r["seed"]): (r["status"], r.get("scores"))
            for r in records.load_all(root / "evals")}


def test_a_killed_study_resumes_to_the_same_records(tmp_path, packed_dir, task_yaml, one_thread, monkeypatch):
    spec = {"splits": {"sizes": ["micro"], "shares": [50], "budgets": [20]}, "intermediate": {"steps": [8]},
            "random_init": ["micro"], "findings": "paper"}
    (tmp_path / "a").mkdir()
    whole = write_study(tmp_path / "a", str(packed_dir), task=str(task_yaml), **spec)
    plan, base = plan_of(whole)
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and result["done"] == result["jobs"] == 3 + 1 + 6  # 3 runs, random init, 6 checkpoints
    random_init = plan.eval_checkpoint(next(e for e in plan.evaluations if e.kind == "random"))
    assert checkpoint.resolve(random_init.parent.parent) == random_init  # its run folder works as any other's
    expected = scores(plan.root)
    assert len(expected) == 6 * 4  # 6 checkpoints x 2 LRs x 2 seeds

    (tmp_path / "b").mkdir()
    killed = write_study(tmp_path / "b", str(packed_dir), task=str(task_yaml), **spec)
    plan_b, base_b = plan_of(killed)
    calls, original = [], runner_module.execute

    def dying(job, log=None, **progress):
        if len(calls) == 4:
            raise KeyboardInterrupt  # the kill: mid-study, after some pretraining and evaluation
        calls.append(job.id)
        return original(job, log, **progress)

    monkeypatch.setattr(runner_module, "execute", dying)
    with pytest.raises(KeyboardInterrupt):
        run_study(plan_b, base_b, log=lambda m: None)
    monkeypatch.setattr(runner_module, "execute", original)
    again = run_study(plan_b, base_b, log=lambda m: None)
    assert again["done_now"] == again["jobs"] - 4  # nothing finished before the kill is redone
    got = scores(plan_b.root)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key][0] == expected[key][0]
        assert json.dumps(got[key][1], sort_keys=True) == json.dumps(expected[key][1], sort_keys=True), key
    report = write_report(plan_b.root)
    assert "The paper's five findings" in report.read_text()


def test_a_failed_run_skips_its_dependents_and_the_rest_goes_on(tmp_path, packed_dir, task_yaml, one_thread,
                                                                monkeypatch):
    study = write_study(tmp_path, str(packed_dir), task=str(task_yaml))
    plan, base = plan_of(study)
    original = runner_module.execute

    def failing(job, log=None, **progress):
        if job.id == "pretrain:micro-clm-20":
            raise RuntimeError("disk on fire")
        return original(job, log, **progress)

    monkeypatch.setattr(runner_module, "execute", failing)
    result = run_study(plan, base, log=lambda m: None)
    assert list(result["failed"]) == ["pretrain:micro-clm-20"] and "disk on fire" in result["failed"][
        "pretrain:micro-clm-20"]
    assert result["skipped"] == ["eval:micro-clm-20:" + str(task_yaml)]
    assert (plan.root / "status" / "pretrain__micro-clm-20.json").exists()
    assert result["done"] == 2  # the MLM model and its evaluation
    report = write_report(plan.root).read_text()  # opens with what is missing from every table below
    assert "**This study is not complete: 1 job(s) failed and 1 were skipped**" in report
    assert "- pretrain:micro-clm-20: **failed**: RuntimeError: disk on fire" in report
    assert f"- eval:micro-clm-20:{task_yaml}: **skipped**: pretrain:micro-clm-20 failed" in report
    (plan.root / "status" / "eval__gone__task.json").write_text('{"job": "eval:gone:task", "status": "failed", '
                                                                 '"reason": "a job the plan no longer has"}')
    monkeypatch.setattr(runner_module, "execute", original)
    assert not run_study(plan, base, log=lambda m: None)["failed"]
    assert not list((plan.root / "status").iterdir())  # done now, or no longer planned: nothing stale is left
    assert "This study is not complete" not in write_report(plan.root).read_text()


def test_a_damaged_or_foreign_final_checkpoint_is_not_a_finished_run(tmp_path, packed_dir, task_yaml, one_thread):
    plan, base = plan_of(write_study(tmp_path, str(packed_dir), task=str(task_yaml)))
    assert run_study(plan, base, log=lambda m: None, only="pretrain")["done_now"] == 2
    runs = plan.root / "pretrain"
    clm, mlm = (runs / name / "checkpoints" / "step-0000020" for name in ("micro-clm-20", "micro-mlm40-20"))
    kept = tmp_path / "kept"
    clm.rename(kept)
    shutil.copytree(mlm, clm)  # another run's checkpoint in this run's place
    result = run_study(plan, base, log=lambda m: None, only="pretrain")
    assert f"{clm} was written by run 'micro-mlm40-20' (mlm40), not by this study's 'micro-clm-20' (clm)" in \
        result["failed"]["pretrain:micro-clm-20"]
    shutil.rmtree(clm)
    kept.rename(clm)
    weights = clm / checkpoint.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])  # cut short: seen by its size, before any weights are read
    result = run_study(plan, base, log=lambda m: None, only="pretrain")
    size = weights.stat().st_size
    assert f"{weights} has {size} bytes, {checkpoint.MANIFEST} records {size + 8}" in \
        result["failed"]["pretrain:micro-clm-20"]


def test_the_study_says_its_jobs_dtype_lines_once_before_any_job(tmp_path, packed_dir, task_yaml, monkeypatch):
    """A job's own lines go nowhere in a study, so the study says them: here a bf16 pretraining config on a device
    without native bf16, once for its two models, before the first job ends."""
    from encoderlab.runs import optim

    monkeypatch.setattr(optim, "bf16_is_native", lambda device: False)
    study = write_study(tmp_path, str(packed_dir), task=str(task_yaml))
    pretrain = tmp_path / "pretrain.yaml"
    pretrain.write_text(pretrain.read_text().replace("dtype: fp32", "dtype: bf16\n  device: cpu"))
    plan, base = plan_of(study)

    def not_now(job, log=None, **progress):
        raise RuntimeError("not now")

    monkeypatch.setattr(runner_module, "execute", not_now)
    lines: list[str] = []
    run_study(plan, base, log=lines.append)
    notes = [line for line in lines if "no native matrix kernels" in line]
    assert len(notes) == 1 and notes[0].startswith("train.dtype: bf16 has no native matrix kernels on this cpu")
    assert lines[0].startswith("study s: 4 jobs, 0 already done, 4 to do") and lines[1] == notes[0]


# ------------------------------------------------------------------------------------------------ report

FAMILIES = {"rt-polarity": ("classification", "accuracy", 50.0), "conll-ner": ("tokens", "f1", 0.0),
            "wiki-cloze": ("qa", "f1", 7.0), "wiki-title": ("retrieval", "ndcg@10", 0.3)}


def fake_records(plan, base) -> None:
    """Records in the sweep's format for every evaluation: MLM better than CLM, CLM steadier, 25% split best."""
    from encoderlab.core.io import write_json

    rec = plan.record(base)
    for e in rec["evaluations"]:
        e["tasks"] = list(FAMILIES)  # what the records below are of (the report counts a plan's tasks only)
    plan.root.mkdir(parents=True)
    write_json(plan.root / "plan.json", rec)
    key = records.protocol_key(rec["protocol"])
    rng = random.Random(0)
    for e in rec["evaluations"]:
        level = 60.0 + (8 if "mlm" in e["label"] else 0) + (3 if "clm-" in e["label"] and "mlm" in e["label"] else 0)
        level -= 20 if e["kind"] == "random" else 10 * (e["kind"] == "intermediate") * (1 - e["step"] / 20)
        noise = 1.0 if e["label"].startswith("micro-clm-20") else 4.0
        for task, (family, metric, baseline) in FAMILIES.items():
            for lr in rec["protocol"]["lrs"]:
                for seed in rec["protocol"]["seeds"]:
                    val = level + rng.gauss(0, noise)
                    records.write(records.record_path(plan.root / "evals", e["tag"], key, task, "0" * 16, lr, seed), {
                        "tag": e["tag"], "task": task, "family": family, "metric": metric, "status": "ok",
                        "fingerprint": "0" * 16, "protocol": rec["protocol"],
                        "lr": lr, "seed": seed, "baseline": {s: {"score": baseline} for s in ("validation", "test")},
                        "scores": {"validation": {"score": val}, "test": {"score": val + rng.gauss(0, 0.5)}}})
    for run in rec["runs"]:
        obj = run["schedule"][-1][0]
        lines = [json.dumps({"step": s, f"{obj}/loss": 8 - s / 10}) for s in range(2, run["steps"] + 1, 2)]
        (plan.root / "pretrain" / run["name"]).mkdir(parents=True, exist_ok=True)
        (plan.root / "pretrain" / run["name"] / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_report_renders_every_section_from_records(tmp_path):
    study = write_study(tmp_path, "nowhere", splits={"sizes": ["micro"], "shares": [0, 25, 50, 75, 100],
                                                     "budgets": [20]},
                        intermediate={"steps": [4, 8]}, random_init=["micro"],
                        cpt={"sizes": ["micro"], "sources": ["clm", "mlm40"], "steps": [6],
                             "lr_schedule": {"warmup_steps": 1, "decay_steps": 2}}, findings="paper")
    plan, base = plan_of(study)
    fake_records(plan, base)
    text = write_report(plan.root).read_text()
    out = plan.root / "report"
    for section in ("Sanity check: pretraining beats random initialisation", "five findings",
                    "Category scores per model", "Per-dataset scores", "Data efficiency",
                    "Fine-tuning stability", "CLM/MLM40 splits at 20 steps", "CPT with MLM from the CLM model",
                    "Pretraining loss", "## Protocol", "micro-random", "*baseline: majority class*"):
        assert section in text, section
    # records from before the lexical baselines: their column reads "-", and the report says why
    assert "| *baseline: TF-IDF + LR* | - |" in text and '"-": not in the records' in text
    assert "**1. MLM beats CLM on most tasks** (A = micro-mlm40-20, B = micro-clm-20): **reproduced**" in text
    # finding 2 over every intermediate step before the paper's crossover (10/42 of the budget for SC, 20/42 for IR)
    early = text.split("**2. CLM learns faster early**")[1].split("**3.")[0]
    assert "SC to step 5, QA to step 5, IR to step 10" in early and "of 4 checkpoint x category comparisons" in early
    assert all(f"| {row} |" in early for row in ("SC at 4", "QA at 4", "IR at 4", "IR at 8"))
    assert "SC at 8" not in early and "TC at" not in early
    stability = text.split("**3. CLM fine-tunes more stably**")[1].split("\n")[0]
    # CLM's noise is a quarter of MLM's, but 4 runs per category are few: never the opposite direction
    assert ("**reproduced**" in stability or "**inconclusive at this scale**" in stability) and "opposite in" not in \
        stability
    for name in ("data_efficiency.png", "stability.png", "pretraining_loss.png", "categories.csv", "sanity.csv",
                 "datasets.csv", "splits-micro-20-clm-mlm40.csv", "cpt-micro-from-clm.csv"):
        assert (out / name).stat().st_size > 0, name
    cats = (out / "categories.csv").read_text().splitlines()
    assert cats[0] == "model,SC,TC,QA,IR" and len(cats) == 1 + len([e for e in plan.evaluations
                                                                       if e.kind in ("final", "random")])


def test_the_data_efficiency_figure_has_a_panel_for_each_category_with_lines(tmp_path, monkeypatch):
    """A last category with no dataset at every step drew an empty panel, and the legend went on it: no legend, and
    matplotlib's "No artists with labels" warning on stderr."""
    import warnings

    from encoderlab.study.report import Report

    study = write_study(tmp_path, "nowhere", intermediate={"steps": [4, 8]}, random_init=["micro"])
    plan, base = plan_of(study)
    fake_records(plan, base)
    points = Report.efficiency_points
    monkeypatch.setattr(Report, "efficiency_points", lambda self, cat: {} if cat == "IR" else points(self, cat))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_report(plan.root)
    rows = (plan.root / "report" / "data_efficiency.csv").read_text().splitlines()[1:]
    assert {row.split(",")[1] for row in rows} == {"SC", "TC", "QA"}


def test_report_of_a_folder_that_is_not_a_study(tmp_path):
    from encoderlab.core.errors import EncoderlabError

    with pytest.raises(EncoderlabError, match="not a study folder"):
        write_report(tmp_path)


def test_two_worker_processes_give_the_records_of_one(tmp_path, packed_dir, task_yaml, one_thread, monkeypatch):
    monkeypatch.setattr(scheduler.os, "cpu_count", lambda: 2)  # one thread per worker, as one_thread here
    spec = {"splits": {"sizes": ["micro"], "shares": [50], "budgets": [20]}}
    roots = []
    for name, workers in (("one", 1), ("two", 2)):
        (tmp_path / name).mkdir()
        plan, base = plan_of(write_study(tmp_path / name, str(packed_dir), task=str(task_yaml), **spec))
        result = run_study(plan, base, workers=workers, log=lambda m: None)
        assert not result["failed"] and result["done"] == result["jobs"] == 3 + 3
        roots.append(plan.root)
    one, two = scores(roots[0]), scores(roots[1])
    assert one.keys() == two.keys() and len(one) == 3 * 4
    for key in one:
        assert json.dumps(one[key], sort_keys=True) == json.dumps(two[key], sort_keys=True), key


def test_retrieval_trained_once_is_one_study_job():
    """With retrieval.train_on the retrieval tasks of a checkpoint share one model per LR and seed: one job trains
    it (the plan counts it once), where one job a task would train it again for each."""
    from encoderlab.finetuning.protocol import Protocol
    from encoderlab.finetuning.shared_training import job_groups

    tasks = ["sst2", "msmarco", "nq", "mldr"]
    assert job_groups(tasks, Protocol()) == [(t, [t]) for t in tasks]
    paper = Protocol(retrieval={"train_on": "msmarco", "corpus": "judged", "relevance": "binary", "loss": "mnrl"})
    assert job_groups(tasks, paper) == [("sst2", ["sst2"]), ("retrieval", ["msmarco", "nq", "mldr"])]


def test_a_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """The report folder is replaced whole: a file of an earlier report that this one no longer writes is gone, and
    a write that fails midway (a full disk while a figure is saved) leaves the old report as it was, with one line
    naming the folder, and no temporary folder."""
    import errno

    from matplotlib.figure import Figure

    from encoderlab.core.errors import WriteFailed

    study = write_study(tmp_path, "nowhere", random_init=["micro"])
    plan, base = plan_of(study)
    fake_records(plan, base)
    out = plan.root / "report"
    write_report(plan.root)
    (out / "sanity-of-an-earlier-model.csv").write_text("model,random_init\n")  # an earlier report's table
    write_report(plan.root)
    assert not (out / "sanity-of-an-earlier-model.csv").exists() and (out / "sanity.csv").is_file()
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(self, fname, **kwargs):
        Path(fname).write_bytes(b"\x89PNG\r\n")  # a figure cut short
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(WriteFailed) as failed:
        write_report(plan.root)
    assert str(failed.value) == f"cannot write {out}: No space left on device; nothing was written there"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in plan.root.iterdir() if p.name.startswith(".report")) == []
