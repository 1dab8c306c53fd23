"""`encoderlab mteb` (hub/mteb_eval.py, tasks/mteb_tasks.py): the mteb library scores a tiny encoderlab checkpoint on
an offline retrieval and an offline classification task, offline (HF_HUB_OFFLINE=1), as MTEB custom tasks: the
retrieval score is exactly encoderlab's own frozen-embedding search, the numbers are reproducible, each sits beside
its baselines; a wrong model, task, family or --out is one line, exit 2, and nothing is written."""
from __future__ import annotations

import json
import math
import random

import pytest
import torch
from conftest import run_command, tiny_checkpoint

pytest.importorskip("mteb", reason="the mteb extra is not installed (pip install 'encoderlab[mteb]')")

from encoderlab.data.offline.taskfiles import write_task_folder  # noqa: E402
from encoderlab.runs import checkpoint as ckpt  # noqa: E402
from encoderlab.tasks import load_task  # noqa: E402

WORDS = ("river village market harbour castle forest bridge garden tower valley school island mountain church "
         "station library museum theatre lake farm").split()


def write_offline_tasks(root) -> None:
    """Three tasks in the offline suite's format (data/offline/taskfiles.py): retrieval (BEIR files),
    classification (a label per text) and tokens (which MTEB does not score)."""
    rng = random.Random(0)
    docs = {f"d{i}": " ".join(rng.sample(WORDS, 6)) for i in range(60)}

    def beir(folder):
        (folder / "qrels").mkdir()
        (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                                                     for d, t in docs.items()))
        (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": " ".join(
            docs[f"d{i}"].split()[:3])}) + "\n" for i in range(30)))
        for split, ids in (("train", range(0, 10)), ("validation", range(10, 20)), ("test", range(20, 30))):
            (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
                f"q{i}\td{i}\t1\n" for i in ids))

    write_task_folder(root, {"name": "tiny-ir", "family": "retrieval"}, {}, write_data=beir)
    labels = ["water", "land"]
    rows = lambda n: [{"id": str(i), "text": " ".join(rng.sample(WORDS[:10] if y else WORDS[10:], 4)), "label": y}  # noqa: E731
                      for i, y in enumerate(rng.choices([0, 1], k=n))]
    write_task_folder(root, {"name": "tiny-sc", "family": "classification", "labels": labels},
                      {}, splits={"train": rows(60), "validation": rows(20), "test": rows(40)})
    tags = [{"id": "0", "tokens": ["river"], "tags": ["O"]}]
    write_task_folder(root, {"name": "tiny-ner", "family": "tokens", "labels": ["O"]}, {},
                      splits=dict.fromkeys(("train", "validation", "test"), tags))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_thread):
    """An ENCODERLAB_HOME holding the offline tasks and a tiny random-weight checkpoint (fp32)."""
    root = tmp_path_factory.mktemp("mteb")
    write_offline_tasks(root / "home" / "data" / "offline" / "tasks")
    tiny_checkpoint(root / "ckpt")
    return root


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def mteb(monkeypatch, capsys, setup, *args):
    return run_command(monkeypatch, capsys, "mteb", *args, home=setup / "home")


def own_frozen_ndcg(setup) -> float:
    """encoderlab's retrieval evaluation of the checkpoint with no fine-tuning: NDCG@10 on test."""
    model, cfg, tok = ckpt.load_model(setup / "ckpt")
    task = load_task("tiny-ir", root=setup / "home" / "data" / "offline" / "tasks")
    task.prepare(tok, cfg.max_position_embeddings)
    with torch.no_grad():
        return task.evaluate(model.model.eval(), None, "test", 32)["ndcg@10"]


def test_mteb_scores_offline_tasks_as_encoderlab_does(setup, monkeypatch, capsys):
    out = setup / "out"
    code, stdout, stderr = mteb(monkeypatch, capsys, setup, setup / "ckpt", "--tasks", "tiny-ir", "tiny-sc",
                                "--out", out)
    assert code == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["task"]: r for r in summary["tasks"]}
    assert (rows["tiny-ir"]["metric"], rows["tiny-sc"]["metric"]) == ("ndcg_at_10", "accuracy")
    for row in rows.values():
        assert math.isfinite(row["score"]) and 0 <= row["score"] <= 100
    # mteb's own files, one per task
    files = {p.name for p in (out / "results").rglob("*.json")}
    assert {"encoderlab-tiny-ir.json", "encoderlab-tiny-sc.json"} <= files
    # the same ranking as encoderlab's frozen search: mteb keeps 5 decimals of a fraction
    assert abs(rows["tiny-ir"]["score"] - own_frozen_ndcg(setup)) < 1e-3
    assert set(rows["tiny-ir"]["baselines"]) == {"random ranking", "BM25 (full text)"}
    assert set(rows["tiny-sc"]["baselines"]) == {"majority class", "TF-IDF + LR (full text)"}
    assert "tiny-ir" in stdout and "BM25" in stdout and "ndcg_at_10" in stdout


def test_the_same_numbers_again_and_from_the_exported_folder(setup, monkeypatch):
    """Reproducible: the checkpoint again, and its sentence-transformers export, give the same scores; a plain
    transformers folder (the EuroBERT export) is mean-pooled by sentence-transformers and scored too."""
    import encoderlab

    monkeypatch.setenv("ENCODERLAB_HOME", str(setup / "home"))
    quiet = {"log": lambda m: None}
    encoderlab.export(setup / "ckpt", setup / "st", kind="sentence-transformers", **quiet)
    encoderlab.export(setup / "ckpt", setup / "hf", kind="eurobert", **quiet)
    runs = {name: encoderlab.mteb(setup / name, ["tiny-ir", "tiny-sc"], setup / f"out-{name}", **quiet)
            for name in ("ckpt", "st", "hf")}
    assert [r["model_kind"] for r in runs.values()] == ["encoderlab", "sentence-transformers", "transformers"]
    scores = {name: [row["score"] for row in run["tasks"]] for name, run in runs.items()}
    assert scores["st"] == scores["ckpt"]
    assert all(math.isfinite(s) and 0 <= s <= 100 for s in scores["hf"])


@pytest.mark.parametrize("args, message", [
    (["{missing}", "--tasks", "tiny-ir"], "does not exist or is not a folder"),
    (["{ckpt}", "--tasks", "no-such-task"], "unknown task 'no-such-task'"),
    (["{ckpt}", "--tasks", "tiny-ner"], "'tiny-ner' is a tokens task: MTEB scores offline tasks of the "
                                        "classification and retrieval families only"),
    (["{ckpt}", "--tasks", "SciFact"], "HF_HUB_OFFLINE is set"),
    (["{remote}", "--tasks", "tiny-ir"], "only Python code in"),
    (["{empty}", "--tasks", "tiny-ir"], "holds no model.safetensors"),
])
def test_bad_inputs_are_one_line_and_write_nothing(setup, monkeypatch, capsys, args, message):
    remote = setup / "remote"
    remote.mkdir(exist_ok=True)
    (remote / "config.json").write_text(json.dumps({"model_type": "mine", "auto_map": {"AutoModel": "m.Mine"}}))
    empty = setup / "empty"  # a transformers config without weights or tokenizer
    empty.mkdir(exist_ok=True)
    (empty / "config.json").write_text(json.dumps({"model_type": "bert"}))
    given = [a.format(missing=setup / "nothing", ckpt=setup / "ckpt", remote=remote, empty=empty) for a in args]
    out = setup / "bad-out"
    code, stdout, stderr = mteb(monkeypatch, capsys, setup, *given, "--out", out)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_a_non_empty_out_is_refused_without_force(setup, monkeypatch, capsys):
    out = setup / "full"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, stderr = mteb(monkeypatch, capsys, setup, setup / "ckpt", "--tasks", "tiny-ir", "--out", out)
    assert code == 2 and "exists and is not empty" in stderr
    assert (out / "keep.txt").read_text() == "mine"


def test_a_study_scores_its_models_with_mteb_and_reports_them(setup, packed_dir, tmp_path, monkeypatch, capsys):
    """`evaluation.mteb` in a study: one MTEB job per final model and random-init baseline, done once for their
    weights, and a report section with each score beside the tasks' baselines."""
    import yaml

    from encoderlab.study.plan import build_plan
    from encoderlab.study.report import write_report
    from encoderlab.study.runner import run_study
    from encoderlab.study.spec import load_study

    monkeypatch.setenv("ENCODERLAB_HOME", str(setup / "home"))
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": str(packed_dir)}, "model": {"preset": "micro", "hidden_size": 32, "intermediate_size": 64,
                                                     "num_hidden_layers": 2, "num_attention_heads": 2,
                                                     "num_key_value_heads": 1},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 2, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0],
        "max_length": 32, "dtype": "fp32"}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 2,
        "models": [{"sizes": ["micro"], "objectives": ["mlm40"]}], "random_init": ["micro"],
        "evaluation": {"protocol": "protocol.yaml", "tasks": ["tiny-sc"], "mteb": ["tiny-ir", "tiny-sc"]},
        "data_shape": {"vocab_size": 320, "seq_len": 64}}))
    spec, base = load_study(tmp_path / "study.yaml")
    plan = build_plan(spec, base)
    assert plan.summary()["mteb"] == {"tasks": ["tiny-ir", "tiny-sc"], "models": 2}
    from encoderlab.cli.console import out
    from encoderlab.cli.study import render_plan

    monkeypatch.setattr(out, "width", 300)
    capsys.readouterr()
    render_plan(plan.summary())  # `study plan` says what MTEB will score
    assert "MTEB 2 models x 2 tasks (tiny-ir, tiny-sc), frozen embeddings" in capsys.readouterr().out
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and result["done"] == result["jobs"]
    folders = sorted(p.parent.name for p in (plan.root / "mteb").glob("*/summary.json"))
    assert folders == ["micro-mlm40-2", "micro-random"]
    text = write_report(plan.root).read_text()
    section = text.split("## MTEB (frozen embeddings)")[1]
    assert "| model | tiny-ir (ndcg_at_10) | tiny-sc (accuracy) |" in section
    assert "| micro-mlm40-2 |" in section and "| *BM25 (full text)* |" in section
    assert run_study(plan, base, log=lambda m: None)["done_now"] == 0  # done for these weights

    def study_with(mteb_tasks):  # the study file changed: another `evaluation.mteb`, or none
        body = yaml.safe_load((tmp_path / "study.yaml").read_text())
        body["evaluation"]["mteb"] = mteb_tasks
        (tmp_path / "study.yaml").write_text(yaml.safe_dump(body))
        return build_plan(*load_study(tmp_path / "study.yaml"))

    assert run_study(study_with(["tiny-sc"]), base, log=lambda m: None)["done_now"] == 2  # not the old list's
    section = write_report(plan.root).read_text().split("## MTEB (frozen embeddings)")[1]
    assert "| model | tiny-sc (accuracy) |" in section and "tiny-ir" not in section
    run_study(study_with(None), base, log=lambda m: None)
    assert "## MTEB" not in write_report(plan.root).read_text()  # its summaries kept, not reported


@pytest.mark.parametrize("how, says", [
    ("missing-weight", "weights of the bert body are not in its files"),
    ("shard-outside", "names a shard that is not a file of this folder"),
    ("pickle", "pytorch_model.bin is a pickle"),
    ("no-tokenizer", "has no tokenizer"),
    ("small-vocab", "but the model has 20 embeddings"),
])
def test_mteb_checks_a_folder_as_fine_tuning_does(setup, monkeypatch, capsys, how, says):
    """sentence-transformers would embed with any of these (a random weight, a file from elsewhere, a pickle, a
    tokenizer made from config.json alone, ids past the embeddings): each is one line, before any work."""
    from test_transformers_encoders import broken

    folder = broken(setup / f"broken-{how}", how)
    out = setup / f"out-{how}"
    code, _, stderr = mteb(monkeypatch, capsys, setup, folder, "--tasks", "tiny-ir", "--out", out)
    assert code == 2 and says in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()
