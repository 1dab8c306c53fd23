"""The CPU studies plan as documented: `make demo` (configs/studies/demo.yaml) and the small study whose report is
docs/findings.md (configs/studies/small.yaml), so that neither rots between the runs that measure them."""
from __future__ import annotations

from pathlib import Path

from encoderlab.study.plan import build_plan, load_protocol
from encoderlab.study.spec import DataShape, load_study

STUDIES = Path(__file__).resolve().parents[2] / "configs" / "studies"
OFFLINE = DataShape(vocab_size=8192, seq_len=512)  # the offline suite's tokenizer and windows
RETRIEVAL = {"wiki-title", "wiki-description", "imdb-long"}  # the offline suite's retrieval tasks


def plan(name: str, tmp_path, monkeypatch):
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))  # nothing prepared: the plan uses data_shape
    monkeypatch.chdir(tmp_path)
    spec, base = load_study(STUDIES / f"{name}.yaml")
    return build_plan(spec.model_copy(update={"data_shape": OFFLINE}), base)


def test_demo_is_clm_and_mlm_at_one_budget_against_random_init(tmp_path, monkeypatch):
    p = plan("demo", tmp_path, monkeypatch)
    assert sorted(p.runs) == ["micro-clm-1200", "micro-mlm40-1200"]
    assert {e.kind for e in p.evaluations} == {"final", "random"}
    categories = {"wiki-topic", "conll-ner", "wiki-cloze", "wiki-title"}  # one per category
    assert all(set(e.tasks) == categories for e in p.evaluations)  # the sanity check compares like with like
    assert p.eval_runs == 3 * 4 * 3


def test_the_demo_is_a_subset_of_the_small_study(tmp_path, monkeypatch):
    """The demo's models, random-init baseline and protocol are the small study's, so that what `make demo` shows
    and what docs/findings.md reports for the same models and tasks are the same numbers."""
    demo, small = plan("demo", tmp_path, monkeypatch), plan("small", tmp_path, monkeypatch)

    def training(p, name):  # what decides the weights: not where they are written nor which steps are also kept
        config = p.config(p.runs[name])
        return {**config, "out_dir": None, "train": {**config["train"], "save_at": None}}

    assert demo.runs.keys() <= small.runs.keys()
    assert all(training(demo, name) == training(small, name) for name in demo.runs)
    assert load_protocol(demo.spec, STUDIES) == load_protocol(small.spec, STUDIES)
    small_tasks = {e.label: set(e.tasks) for e in small.evaluations}
    assert all(set(e.tasks) <= small_tasks[e.label] for e in demo.evaluations)


def test_small_study_asks_all_five_questions(tmp_path, monkeypatch):
    p = plan("small", tmp_path, monkeypatch)
    runs = p.runs
    assert sorted(runs) == sorted(["micro-clm-1200", "micro-mlm40-1200", "micro-clm-300-mlm40-1200",
                                   "micro-clm-900-mlm40-1200", "micro-clm-dec1200-mlm40-1500",
                                   "micro-mlm40-dec1200-mlm40-1500"])
    # the splits branch off the CLM trunk before its decay (docs/paper.md#pretraining): 25% and 75% of the total budget
    assert {runs[n].parent for n in ("micro-clm-300-mlm40-1200", "micro-clm-900-mlm40-1200")} == {"micro-clm-1200"}
    assert [runs[n].branch_step for n in ("micro-clm-300-mlm40-1200", "micro-clm-900-mlm40-1200")] == [300, 900]
    kinds = [e.kind for e in p.evaluations]
    assert kinds.count("intermediate") == 6 and kinds.count("random") == 1 and kinds.count("final") == 6
    random_init = next(e for e in p.evaluations if e.kind == "random")
    assert len(random_init.tasks) == 9  # every task the final models run: the sanity check covers all of them
    assert p.eval_runs == 261


def test_small_authors_is_the_small_study_under_the_authors_evaluation(tmp_path, monkeypatch):
    """docs/findings.md compares the two reports model by model: the same runs with the same weights, the same tasks,
    only the evaluation protocol differs (and the intermediate checkpoints skip QA, which only abstains there)."""
    from encoderlab import tasks as registry

    # Retrieval trained once (`train_on`) counts its runs by family, read from the offline tasks (not prepared here).
    monkeypatch.setattr(registry, "task_family", lambda t: "retrieval" if t in RETRIEVAL else "classification")
    authors, small = plan("small-authors", tmp_path, monkeypatch), plan("small", tmp_path, monkeypatch)

    def training(p, name):  # branches and CPT start from the same run of their own study folder
        config = p.config(p.runs[name])
        init = {k: v and str(v).replace(str(p.root), "STUDY") for k, v in config.get("init", {}).items()}
        return {**config, "out_dir": None, "init": init, "train": {**config["train"], "save_at": None}}

    assert authors.runs.keys() == small.runs.keys()
    assert all(training(authors, name) == training(small, name) for name in small.runs)
    tasks = {e.label: set(e.tasks) for e in small.evaluations}
    for e in authors.evaluations:
        qa = {"wiki-title-span"} if e.kind == "intermediate" else set()
        assert set(e.tasks) == tasks[e.label] - qa, e.label
    assert str(authors.spec.evaluation.protocol).endswith("eval/small-study-authors.yaml")


def test_written_configs_keep_dtype_auto_for_the_machine_that_runs_them(tmp_path, monkeypatch):
    """`study plan --write-configs` writes the study file's `dtype: auto`, not this machine's choice: the jobs may run
    on other machines (a cluster's GPU nodes), each deciding for itself."""
    import yaml

    from encoderlab.study.jobs import jobs_of
    from encoderlab.study.runner import write_configs

    p = plan("demo", tmp_path, monkeypatch)
    write_configs(p, jobs_of(p))
    written = sorted((p.root / "configs").glob("*.yaml"))
    assert [f.stem for f in written] == ["micro-clm-1200", "micro-mlm40-1200"]
    for file in written:
        assert yaml.safe_load(file.read_text())["train"]["dtype"] == "auto"

