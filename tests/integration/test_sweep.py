"""Sweeps end to end on a tiny checkpoint: records, resume after a kill, failed runs, aggregation, bad input."""
from __future__ import annotations

import json
import math
import random

import pytest

from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError, Failed
from encoderlab.finetuning.aggregate import check_scored
from encoderlab.finetuning import sweep as sweep_module
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer

TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, packed_dir):
    out = tmp_path_factory.mktemp("runs")
    cfg = validate(PretrainConfig, {
        "name": "tiny", "out_dir": str(out), "data": {"path": str(packed_dir)}, "model": TINY, "objective": "mlm40",
        "lr_schedule": {"warmup_steps": 2, "decay_steps": 2},
        "train": {"steps": 6, "global_batch": 4, "dtype": "fp32", "tensorboard": False}}, "test")
    Trainer(cfg, show_progress=False).run()
    return out / "tiny"


@pytest.fixture
def task_yaml(tmp_path):
    """A learnable sentiment-like task: the label is whether 'good' or 'bad' appears."""
    rng = random.Random(0)
    words = "the film was very quite rather plot actors story".split()

    def rows(n):
        out = []
        for _ in range(n):
            label = rng.randint(0, 1)
            text = " ".join(rng.choices(words, k=5) + ["good" if label else "bad"] + rng.choices(words, k=3))
            out.append({"text": text, "label": "pos" if label else "neg"})
        return out

    for split, n in (("train", 64), ("dev", 24), ("test", 24)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(n)))
    (tmp_path / "task.yaml").write_text("family: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\n"
                                        "test: test.jsonl\ntext_column: text\nlabel_column: label\n")
    return tmp_path / "task.yaml"


def protocol(**over) -> Protocol:
    return Protocol(**{"name": "t", "max_steps": 6, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3, 3e-3],
                       "seeds": [0, 1], "max_length": 32, "dtype": "fp32", "curve_every": 2, **over})


def test_sweep_records_resume_and_summary(tmp_path, tiny_checkpoint, task_yaml, monkeypatch):
    out = tmp_path / "evals"
    real = sweep_module.finetune
    calls = {"n": 0}

    def killed_after_two(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the user pressed Ctrl-C during the third run
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "finetune", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), out, show_progress=False, log=lambda m: None)
    records = sorted(out.rglob("lr*.json"))
    assert len(records) == 2
    monkeypatch.setattr(sweep_module, "finetune", real)
    summary = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), out, show_progress=False, log=lambda m: None)
    assert summary["runs_done_this_time"] == 2  # only what was left
    assert len(sorted(out.rglob("lr*.json"))) == 4
    (task,) = summary["tasks"].values()
    assert task["runs"] == 4 and task["failed"] == 0 and task["seeds"] == 2
    assert task["test_examples"] == 24  # what its test score averages over, for the model card
    assert task["best_lr"] in (1e-3, 3e-3) and 0 <= task["test"] <= 100 and task["ci95"] >= 0
    record = json.loads(records[0].read_text())
    assert record["status"] == "ok" and record["steps"] == 6 and record["curve"][-1][0] == 6
    assert set(record["scores"]) == {"validation", "test"} and "accuracy" in record["scores"]["test"]
    assert record["protocol"]["lrs"] == [1e-3, 3e-3] and record["baseline"]["test"]["score"] > 0
    again = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), out, show_progress=False, log=lambda m: None)
    assert again["runs_done_this_time"] == 0 and again["tasks"] == summary["tasks"]
    record["scores"]["test"]["score"] = float("nan")  # an "ok" record never holds one (a NaN run fails): damaged
    records[0].write_text(json.dumps(record))
    said = []
    redone = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), out, show_progress=False, log=said.append)
    assert redone["runs_done_this_time"] == 1 and any("scores.test (not finite)" in line for line in said)
    assert math.isfinite(json.loads(records[0].read_text())["scores"]["test"]["score"])
    other = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(max_steps=4, lrs=[1e-3], seeds=[0]), out,
                      show_progress=False, log=lambda m: None)
    assert other["runs_done_this_time"] == 1 and other["protocol_key"] != summary["protocol_key"]


def test_a_grown_grid_runs_only_its_new_points_and_finetune_finds_the_sweeps_run(tmp_path, tiny_checkpoint,
                                                                                   task_yaml):
    """Key algorithm 2: the grid is not in the protocol key. Seed 0's record, filed in the key-1 folder an older
    encoderlab made for the grid [0], is found; seeds [0, 1] run seed 1 alone; `finetune --lr --seed` of it runs
    nothing and leaves summary.json the grown grid's; the grid [0] again counts seed 0 alone in its summary, and
    summary.json, of the larger grid the folder's records hold, stays that grid's."""
    import yaml

    from encoderlab import api
    from encoderlab.finetuning import migrate_protocol
    from encoderlab.hub.card import evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    first = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0]), out, **quiet)
    assert first["runs_done_this_time"] == 1
    folder = out / first["tag"] / first["protocol_key"]
    old = folder.rename(folder.parent / migrate_protocol.key(first["protocol"], 1))  # as key algorithm 1 filed it
    grown = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    assert grown["protocol_key"] == first["protocol_key"] and grown["runs_done_this_time"] == 1  # seed 1 alone
    (task,) = grown["tasks"].values()
    assert task["runs"] == 2 and task["seeds"] == 2 and sorted(old.rglob("lr*.json")) == [old / "task" / next(
        p.name for p in (old / "task").iterdir()) / "lr0.001-seed0.json"]  # the old folder kept as it was
    said = []  # the export's card: the key-1 folder's summary is the current key's, shown once
    cards = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out, said.append)
    assert [c["protocol"] for c in cards] == [grown["protocol_key"]]
    assert (old / "summary.json").is_file() and len(said) == 1 and str(old / "summary.json") in said[0]
    file = tmp_path / "protocol.yaml"
    file.write_text(yaml.safe_dump(protocol(lrs=[1e-3], seeds=[0, 1]).model_dump(mode="json")))
    one = api.finetune(tiny_checkpoint, task_yaml, lr=1e-3, seed=1, protocol=file, out=out, log=lambda m: None)
    assert one["protocol_key"] == grown["protocol_key"] and one["runs_done_this_time"] == 0
    assert one["tasks"]["task"]["test"] == round(task["test_by_seed"][1], 3)  # the sweep's run, rounded as a mean
    written = json.loads((folder / "summary.json").read_text())
    assert list(written["tasks"]["task"]["test_by_seed"]) == ["0", "1"]
    assert written["tasks"]["task"]["grid"]["seeds"] == [0, 1] and written["protocol"]["seeds"] == [1]  # the run's
    back = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0]), out, **quiet)
    assert back["runs_done_this_time"] == 0 and back["tasks"]["task"]["runs"] == 1  # seed 1's record not counted
    assert back["tasks"]["task"]["test"] == first["tasks"]["task"]["test"]
    assert json.loads((folder / "summary.json").read_text())["tasks"] == written["tasks"]
    one = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[2]), out, **quiet)
    assert one["runs_done_this_time"] == 1  # one run outside the held grid: the sweep's summary stays
    assert json.loads((folder / "summary.json").read_text())["tasks"]["task"]["grid"]["seeds"] == [0, 1]
    other = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[2, 3]), out, **quiet)
    assert other["runs_done_this_time"] == 1  # a grid of more than one run, not part of the held one, replaces it
    assert list(json.loads((folder / "summary.json").read_text())["tasks"]["task"]["test_by_seed"]) == ["2", "3"]


def test_records_belong_to_the_definition_and_data_of_a_task(tmp_path, tiny_checkpoint, task_yaml):
    """Two task files on one folder, or edited data, never reuse each other's records; the same content does."""
    folder, out, logs = task_yaml.parent, tmp_path / "evals", []
    for split in ("train", "dev", "test"):  # a second labelling of the same texts
        rows = [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({**r, "short": str(len(r["text"]) < 40)}) + "\n"
                                                       for r in rows))
    files = "family: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\ntest: test.jsonl\n"
    (folder / "bbc.yaml").write_text(files)
    (folder / "relabel.yaml").write_text(files + "name: bbc\nlabel_column: short\n")

    def sweep(path):
        logs.clear()
        return run_sweep(tiny_checkpoint, [str(path)], protocol(max_steps=2, lrs=[1e-3], seeds=[0]), out,
                         show_progress=False, log=logs.append)

    first = sweep(folder / "bbc.yaml")
    assert first["runs_done_this_time"] == 1 and list(first["tasks"]) == ["bbc"]
    relabelled = sweep(folder / "relabel.yaml")  # the same name and files, another label column
    assert relabelled["runs_done_this_time"] == 1 and relabelled["tasks"]["bbc"] != first["tasks"]["bbc"]
    assert any(line.startswith("bbc: its data or definition changed since the records in ") for line in logs)
    assert sweep(folder / "bbc.yaml")["tasks"] == first["tasks"] and "0 to do" in "".join(logs)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("bbc.yaml", "train.jsonl", "dev.jsonl", "test.jsonl"):
        (copy / name).write_bytes((folder / name).read_bytes())
    assert sweep(copy / "bbc.yaml")["runs_done_this_time"] == 0  # the same content elsewhere: the same records
    (folder / "train.jsonl").write_text((folder / "train.jsonl").read_text().replace("good", "fine", 1))
    edited = sweep(folder / "bbc.yaml")
    assert edited["runs_done_this_time"] == 1 and "bbc: its data or definition changed" in "".join(logs)
    paths = sorted(out.rglob("lr*.json"))
    assert len(paths) == 3 and len({p.parent for p in paths}) == 3 and {p.parent.parent.name for p in paths} == {"bbc"}
    record = json.loads(paths[0].read_text())
    assert record["task"] == "bbc" and record["fingerprint"] == paths[0].parent.name and record["metric"] == "accuracy"
    cut = record["truncated"]  # the toy tokenizer's pieces are short: most texts exceed 32 tokens
    assert cut["unit"] == "examples" and 0 < cut["train"] <= 64 and set(cut) == {"train", "validation", "test", "unit"}
    said = (f"cut at 32 tokens: {cut['train']} of train, {cut['validation']} of validation, {cut['test']} of test "
            "examples")
    assert any("bbc (classification, accuracy, 2 classes)" in line and said in line for line in logs), logs


def test_bf16_runs(tmp_path, tiny_checkpoint, task_yaml):
    summary = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(dtype="bf16", lrs=[1e-3], seeds=[0]), tmp_path,
                        show_progress=False, log=lambda m: None)
    (task,) = summary["tasks"].values()
    assert task["failed"] == 0 and 0 <= task["test"] <= 100


def test_a_nan_run_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path, tiny_checkpoint, task_yaml, monkeypatch):
    real = sweep_module.finetune

    def nan_at_high_lr(task, *args, lr, **kwargs):
        if lr == 3e-3:
            original = task.loss
            task.loss = lambda *a: original(*a) * math.nan
            try:
                return real(task, *args, lr=lr, **kwargs)
            finally:
                task.loss = original
        return real(task, *args, lr=lr, **kwargs)

    monkeypatch.setattr(sweep_module, "finetune", nan_at_high_lr)
    summary = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path, show_progress=False,
                        log=lambda m: None)
    (task,) = summary["tasks"].values()
    assert task["runs"] == 4 and task["failed"] == 2 and task["best_lr"] == 1e-3
    assert all("nan" in f["reason"] for f in task["failures"])
    check_scored(summary)  # failed runs among others are an LR sweep's outcome, not a failure of the sweep
    task["failed"] = task["runs"]
    with pytest.raises(Failed, match=r"no run of \S+ scored: all 4 failed \(lr 0.003 seed \d: training loss became "
                                     r"nan .*\); lower the LRs, or fix the task"):
        check_scored(summary)  # none scored: no result, and the command exits 1


def test_a_sweep_of_which_no_run_scored_exits_1_after_its_table(tmp_path, tiny_checkpoint, task_yaml, monkeypatch,
                                                               capsys):
    import torch
    from conftest import run_command

    from encoderlab.finetuning import training

    monkeypatch.setattr(training.FinetuneRun, "step", lambda self, batch, lr: (torch.tensor(math.nan), False))
    code, stdout, stderr = run_command(monkeypatch, capsys, "finetune", tiny_checkpoint, task_yaml, "--lr", "1e-3",
                                       "--set", "max_steps=4", "--out", tmp_path)
    assert code == 1 and "scored: all 1 failed (lr 0.001 seed 0: training loss became nan at step 1 of" in stderr
    assert "0/1" in stdout  # the table came first, with its failed run


def test_bad_input_fails_before_training(tmp_path, tiny_checkpoint, task_yaml):
    with pytest.raises(EncoderlabError, match="unknown task 'no-such-task'"):
        run_sweep(tiny_checkpoint, ["no-such-task"], protocol(), tmp_path, show_progress=False, log=lambda m: None)
    dev = task_yaml.parent / "dev.jsonl"
    dev.write_text(dev.read_text() + json.dumps({"text": "a film", "label": "neutral"}) + "\n")
    with pytest.raises(EncoderlabError, match="neutral"):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path, show_progress=False, log=lambda m: None)
    assert not list(tmp_path.rglob("lr*.json"))


def test_the_batched_engine_writes_the_records_of_the_sequential_one(tmp_path, tiny_checkpoint, task_yaml):
    summaries = {engine: run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path / engine, engine=engine,
                                   show_progress=False, log=lambda m: None) for engine in ("sequential", "batched")}
    assert summaries["batched"]["protocol_key"] == summaries["sequential"]["protocol_key"]  # same results, same key
    assert summaries["batched"]["tasks"] == summaries["sequential"]["tasks"]
    for path in sorted((tmp_path / "sequential").rglob("lr*.json")):
        sequential = json.loads(path.read_text())
        batched = json.loads((tmp_path / "batched" / path.relative_to(tmp_path / "sequential")).read_text())
        assert batched.keys() == sequential.keys() and batched["scores"] == sequential["scores"]
        assert (sequential["engine"], batched["engine"]) == ("sequential", "batched")  # each names what made it
        for (step, loss), (step_b, loss_b) in zip(sequential["curve"], batched["curve"]):
            assert step == step_b and loss_b == pytest.approx(loss, rel=1e-5)  # float rounding: tests/unit/test_batched
    with pytest.raises(EncoderlabError, match="engine 'fast' is not one of auto, sequential, batched"):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path, engine="fast", log=lambda m: None)


def test_a_task_can_override_steps_and_length(tmp_path, tiny_checkpoint, task_yaml):
    from encoderlab.tasks import load_task

    name = load_task(str(task_yaml)).name
    own = protocol(lrs=[1e-3], seeds=[0], task_overrides={name: {"max_steps": 3, "max_length": 16}})
    assert own.for_task(name).max_steps == 3 and own.for_task(name).length_for("classification") == 16
    assert own.for_task("another-task") is own
    summary = run_sweep(tiny_checkpoint, [str(task_yaml)], own, tmp_path, show_progress=False, log=lambda m: None)
    (record_path,) = tmp_path.rglob("lr*.json")
    record = json.loads(record_path.read_text())
    assert record["steps"] == 3 and record["protocol"]["task_overrides"] == {name: {"max_steps": 3, "max_length": 16}}
    assert summary["tasks"][name]["runs"] == 1


def test_task_overrides_are_checked():
    with pytest.raises(ValueError, match="lrs cannot be set per task"):
        protocol(task_overrides={"rt-polarity": {"lrs": [1.0]}})
    with pytest.raises(ValueError, match="max_steps"):
        protocol(task_overrides={"rt-polarity": {"max_steps": 0}})


@pytest.fixture
def beir_yaml(tmp_path):
    """A small retrieval task (BEIR layout): its prepared tokens are tensors with NumPy views, the state that
    multiprocessing's shared-memory pickling once corrupted for every worker after the first."""
    rng = random.Random(1)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(rng.choices(words, k=12)) for i in range(40)}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": docs[f"d{i}"][:20]}) + "\n"
                                                  for i in range(40)))
    for split, ids in (("train", range(0, 24)), ("dev", range(24, 32)), ("test", range(32, 40))):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{i}\td{i}\t1\n" for i in ids))
    (tmp_path / "beir.yaml").write_text("family: retrieval\nfolder: beir\n")
    return tmp_path / "beir.yaml"


def test_worker_processes_write_the_records_of_one_process(tmp_path, tiny_checkpoint, task_yaml, beir_yaml):
    import torch

    from encoderlab.tasks import load_task

    name = load_task(str(task_yaml)).name
    own = protocol(task_overrides={name: {"max_steps": 4}})  # the workers apply a task's overrides too
    specs = [str(task_yaml), str(beir_yaml)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # both sides on one thread each: the same float reductions, bit for bit
    try:
        summaries = {n: run_sweep(tiny_checkpoint, specs, own, tmp_path / str(n), engine="sequential", workers=n,
                                  show_progress=False, log=lambda m: None) for n in (1, 2)}
    finally:
        torch.set_num_threads(threads)
    assert summaries[2]["tasks"] == summaries[1]["tasks"] and summaries[2]["runs_done_this_time"] == 8
    paths = sorted((tmp_path / "1").rglob("lr*.json"))
    assert len(paths) == 8
    for path in paths:
        one = json.loads(path.read_text())
        two = json.loads((tmp_path / "2" / path.relative_to(tmp_path / "1")).read_text())
        assert one["status"] == two["status"] == "ok" and one["steps"] == two["steps"]
        assert (one["scores"], one["curve"]) == (two["scores"], two["curve"])
    steps = {(r["task"], r["steps"]) for r in (json.loads(p.read_text()) for p in paths)}
    assert steps == {(name, 4), ("beir", 3)}  # 24 training queries in batches of 8: one epoch is 3 steps
    again = run_sweep(tiny_checkpoint, specs, own, tmp_path / "2", workers=2, show_progress=False,
                      log=lambda m: None)
    assert again["runs_done_this_time"] == 0  # resumable like any sweep


def test_workers_are_refused_where_they_do_not_apply(tmp_path, tiny_checkpoint, task_yaml):
    with pytest.raises(EncoderlabError, match="with --workers 1"):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path, engine="batched", workers=2,
                  log=lambda m: None)
    with pytest.raises(EncoderlabError, match="^--workers 0: give 'auto' or a whole number, 1 or more$"):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path, workers=0, log=lambda m: None)


def test_auto_workers_one_per_thread_on_cpu_only(monkeypatch):
    import torch

    from encoderlab.finetuning import parallel
    from encoderlab.model.presets import preset

    cfg = preset("tiny")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    cpu = torch.device("cpu")
    assert parallel.auto_workers(cpu, "auto", cfg, runs=30) == 4
    assert parallel.auto_workers(cpu, "auto", cfg, runs=3) == 3  # never more processes than runs
    assert parallel.auto_workers(cpu, "batched", cfg, runs=30) == 1
    assert parallel.auto_workers(torch.device("cuda"), "auto", cfg, runs=30) == 1
    monkeypatch.setattr(parallel.os, "sysconf", lambda name: 1024 if name == "SC_PAGE_SIZE" else 10_000)
    assert parallel.auto_workers(cpu, "auto", cfg, runs=30) == 1  # 10 MB of memory: one at a time


def test_retrieval_trained_once_per_lr_and_seed_and_scored_on_every_set(tmp_path, tiny_checkpoint, beir_yaml,
                                                                       monkeypatch):
    """retrieval.train_on: one training per LR x seed on one set's train pairs, a record for each set it scores."""
    import shutil

    zero_shot = tmp_path / "zs"
    shutil.copytree(tmp_path / "beir", zero_shot / "beir2")
    (zero_shot / "beir2" / "qrels" / "train.tsv").unlink()  # a test-only set, as NQ and MLDR for the authors
    (zero_shot / "beir2.yaml").write_text("family: retrieval\nfolder: beir2\n")
    trainings = []
    real = sweep_module.finetune

    def counted(task, *args, **kwargs):
        trainings.append((task.name, kwargs["lr"], kwargs["seed"]))
        return real(task, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "finetune", counted)
    own = protocol(retrieval={"train_on": str(beir_yaml), "corpus": "judged", "relevance": "binary", "loss": "mnrl"})
    specs = [str(beir_yaml), str(zero_shot / "beir2.yaml")]
    said: list[str] = []
    summary = run_sweep(tiny_checkpoint, specs, own, tmp_path / "evals", engine="sequential", show_progress=False,
                        log=said.append)
    assert sorted(trainings) == [("beir", lr, seed) for lr in own.lrs for seed in own.seeds]
    assert [line for line in said if line.startswith("retrieval:")] == [  # the trainer itself trains on its own
        "retrieval: beir2 scored after training on beir's train pairs, not its own (the protocol's "
        "retrieval.train_on; null: each task trains on its own)"]
    recs = [json.loads(p.read_text()) for p in (tmp_path / "evals").rglob("lr*.json")]
    assert sorted((r["task"], r["lr"], r["seed"]) for r in recs) == sorted(
        (t, lr, seed) for t in ("beir", "beir2") for lr in own.lrs for seed in own.seeds)
    assert {r["trained_on"]["task"] for r in recs} == {"beir"} and all(r["status"] == "ok" for r in recs)
    assert set(summary["tasks"]) == {"beir", "beir2"}
    # beir2 alone still trains on beir, and finds its records
    trainings.clear()
    again = run_sweep(tiny_checkpoint, specs[1:], own, tmp_path / "evals", engine="sequential", show_progress=False,
                      log=lambda m: None)
    assert trainings == [] and again["runs_done_this_time"] == 0


def test_a_users_own_retrieval_task_trains_on_its_own_pairs_whatever_train_on_names(tmp_path, tiny_checkpoint,
                                                                                    beir_yaml):
    """The default protocol trains the suite's retrieval tasks on wiki-description, which a user's own set with
    train qrels needs neither prepared nor used: it trains on its own pairs."""
    suite = protocol(lrs=[1e-3], seeds=[0], retrieval={"train_on": "wiki-description", "corpus": "judged"})
    run_sweep(tiny_checkpoint, [str(beir_yaml)], suite, tmp_path / "evals", engine="sequential", show_progress=False,
              log=lambda m: None)
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "evals").rglob("lr*.json")]
    assert rec["status"] == "ok" and rec["trained_on"]["task"] == "beir"


def test_summary_json_keeps_the_tasks_of_earlier_sweeps(tmp_path, tiny_checkpoint, task_yaml):
    """A sweep of one task returns that task, but the folder's summary.json (read by model cards) keeps the others."""
    other = task_yaml.with_name("other.yaml")
    other.write_text(task_yaml.read_text())
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    first = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0]), out, **quiet)
    second = run_sweep(tiny_checkpoint, [str(other)], protocol(lrs=[1e-3], seeds=[0]), out, **quiet)
    assert list(first["tasks"]) == [task_yaml.stem] and list(second["tasks"]) == ["other"]
    written = json.loads(next(out.rglob("summary.json")).read_text())
    assert sorted(written["tasks"]) == sorted([task_yaml.stem, "other"])


def test_inputs_longer_than_an_encoderlab_models_positions_are_refused(tmp_path, task_yaml):
    """An imported model's context (its max_position_embeddings, 64 here) bounds fine-tuning as it bounds
    pretraining's windows: refused before any work, as a transformers encoder's learned positions are."""
    from conftest import tiny_checkpoint as write_checkpoint

    short = write_checkpoint(tmp_path / "short")
    with pytest.raises(EncoderlabError, match=r"max_position_embeddings\) stop at 64 \(set max_length"):
        run_sweep(short, [str(task_yaml)], protocol(max_length=80), tmp_path / "evals", show_progress=False,
                  log=lambda m: None)
    assert not (tmp_path / "evals").exists()


def test_summary_json_holds_a_restored_tasks_first_records(tmp_path, tiny_checkpoint, task_yaml):
    """Data edited, swept, then restored byte for byte: summary.json holds the records of the data there now, not
    those made last (of the edited data)."""
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    proto, train = protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1]), task_yaml.with_name("train.jsonl")

    def sweep() -> dict:
        done = run_sweep(tiny_checkpoint, [str(task_yaml)], proto, out, **quiet)
        return done["runs_done_this_time"], json.loads(next(out.rglob("summary.json")).read_text())["tasks"]

    done, first = sweep()
    original = train.read_bytes()
    rows = train.read_text().splitlines()
    train.write_text("\n".join(rows[1:] + rows[:1]) + "\n")
    done, edited = sweep()
    assert done == 2 and edited != first
    train.write_bytes(original)
    assert sweep() == (0, first)


def test_a_prepared_task_whose_files_are_gone_is_dropped(tmp_path, tiny_checkpoint, task_yaml):
    """A process's prepared tasks (a study run again in one process) hold one whose data was deleted since: a sweep
    of the others goes on, and one of it is refused where every sweep's tasks are checked, in the line a fresh
    process says, not from inside the check of what the process prepared."""
    import traceback

    gone = tmp_path / "gone"
    gone.mkdir()
    for name in ("train.jsonl", "dev.jsonl", "test.jsonl"):
        (gone / name).write_bytes((tmp_path / name).read_bytes())
    (gone / "gone.yaml").write_text(task_yaml.read_text())
    out, quiet, proto = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}, protocol(
        max_steps=2, lrs=[1e-3], seeds=[0])
    specs, prepared = [str(task_yaml), str(gone / "gone.yaml")], {}
    assert run_sweep(tiny_checkpoint, specs, proto, out, prepared=prepared, **quiet)["runs_done_this_time"] == 2
    stale = dict(prepared)
    for deleted in (gone / "train.jsonl", gone / "gone.yaml"):
        deleted.unlink()
        prepared = dict(stale)
        assert run_sweep(tiny_checkpoint, specs[:1], proto, out, prepared=prepared, **quiet)["runs_done_this_time"] == 0
        assert list(prepared) == specs[:1]
        said = []
        for held in ({}, dict(stale)):
            with pytest.raises(EncoderlabError) as refused:
                run_sweep(tiny_checkpoint, specs[1:], proto, out, prepared=held, **quiet)
            frames = [f.name for f in traceback.extract_tb(refused.value.__traceback__)]
            assert "check_specs" in frames and "_forget_changed" not in frames
            said.append(str(refused.value))
        assert said[0] == said[1] and str(deleted) in said[0]


def test_a_run_of_a_key_1_sweeps_grid_refreshes_that_grids_summary_and_the_card_keeps_it(tmp_path, tiny_checkpoint,
                                                                                         task_yaml):
    """After upgrading: a sweep of seeds [0, 1] filed under key 1, then `finetune` of its seed 0 (or a sweep of
    seeds [0]) writes the key-2 folder's first summary.json. It is the key-1 sweep's grid's, with both seeds, as it
    would be had that sweep been made under key 2, so the card, which shows that summary in place of the key-1 one,
    still reports two seeds, not one."""
    from encoderlab.finetuning import migrate_protocol
    from encoderlab.hub.card import evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    swept = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    folder = out / swept["tag"] / swept["protocol_key"]
    old = folder.rename(folder.parent / migrate_protocol.key(swept["protocol"], 1))  # as key algorithm 1 filed it
    summary = json.loads((old / "summary.json").read_text())
    for entry in summary["tasks"].values():
        entry.pop("grid")  # as key 1's encoderlab wrote it: its protocol's grid is every task's
    (old / "summary.json").write_text(json.dumps(summary))
    one = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0]), out, **quiet)
    assert one["runs_done_this_time"] == 0 and one["tasks"]["task"]["runs"] == 1  # its own grid, printed
    written = json.loads((folder / "summary.json").read_text())
    assert written["tasks"]["task"]["grid"]["seeds"] == [0, 1] and written["tasks"]["task"]["runs"] == 2
    cards = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out)
    assert [(c["protocol"], c["tasks"]["task"]["runs"]) for c in cards] == [(swept["protocol_key"], 2)]


def test_the_card_keeps_a_key_1_summary_whose_grid_the_current_keys_does_not_hold(tmp_path, tiny_checkpoint,
                                                                                   task_yaml):
    """A sweep of LR 1e-3 filed under key 1, then `finetune` at another LR under key 2: the key-2 summary.json is
    that one run's, which does not hold the sweep's runs, so the card shows both, each naming its grid, and leaves
    out a key-1 summary only where the key-2 one holds its grid."""
    from encoderlab import api
    from encoderlab.finetuning import migrate_protocol
    from encoderlab.hub.card import evaluation_lines, evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    swept = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    folder = out / swept["tag"] / swept["protocol_key"]
    old = folder.rename(folder.parent / migrate_protocol.key(swept["protocol"], 1))  # as key algorithm 1 filed it
    summary = json.loads((old / "summary.json").read_text())
    (old / "summary.json").write_text(json.dumps({**summary, "protocol_key": old.name}))  # as key 1 wrote it
    file = tmp_path / "protocol.yaml"
    file.write_text(json.dumps(protocol(lrs=[1e-3], seeds=[0, 1]).model_dump(mode="json")))
    api.finetune(tiny_checkpoint, task_yaml, lr=3e-3, seed=0, protocol=file, out=out, log=lambda m: None)
    said = []
    cards = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out, said.append)
    assert sorted((c["protocol"], c["tasks"]["task"]["runs"]) for c in cards) == sorted(
        [(old.name, 2), (swept["protocol_key"], 1)]) and said == []
    text = "\n".join(evaluation_lines(cards))
    assert f"Protocol `{old.name}`, LRs 0.001 x seeds 0, 1 (" in text
    assert f"Protocol `{swept['protocol_key']}`, LRs 0.003 x seeds 0 (" in text
    run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(lrs=[1e-3, 3e-3], seeds=[0, 1]), out, **quiet)
    cards = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out, said.append)
    assert [(c["protocol"], c["tasks"]["task"]["runs"]) for c in cards] == [(swept["protocol_key"], 4)]
    assert said == [f"left out of the card: {old / 'summary.json'}, filed under an older protocol key; "
                    f"{swept['protocol_key']}'s summary holds its runs"]


def _grid(seeds: list[int]) -> dict:
    return {"lrs": [1e-3], "seeds": seeds}


@pytest.mark.parametrize("sweeps", [[("task", [0, 1]), ("other", [0, 1, 2])], [("other", [0, 1, 2]), ("task", [0, 1])],
                                    [("task", [0, 1, 2]), ("other", [2, 3])]])
def test_summary_json_counts_each_task_under_its_own_grid(tmp_path, tiny_checkpoint, task_yaml, sweeps):
    """Two tasks of one checkpoint and protocol swept over other seeds share the protocol's folder and its
    summary.json: each task's entry is aggregated under, and names, the grid it was swept with, whichever came last
    (a task is not reported under the other's grid: fewer seeds of a larger grid, or one seed of a grid elsewhere).
    A `finetune` run of the task afterwards, inside its grid or not, leaves its grid and the other task's as they
    are; the top-level `protocol` is the last sweep's (that run's)."""
    from encoderlab import api

    specs = {"task": task_yaml, "other": task_yaml.with_name("other.yaml")}
    specs["other"].write_text(task_yaml.read_text())
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    for name, seeds in sweeps:
        run_sweep(tiny_checkpoint, [str(specs[name])], protocol(max_steps=2, lrs=[1e-3], seeds=seeds), out, **quiet)
    grids = dict(sweeps)
    file = next(out.rglob("summary.json"))
    written = json.loads(file.read_text())
    assert {name: t["seeds"] for name, t in written["tasks"].items()} == {n: len(s) for n, s in grids.items()}
    assert {name: t["grid"] for name, t in written["tasks"].items()} == {n: _grid(s) for n, s in grids.items()}
    assert written["protocol"]["seeds"] == sweeps[-1][1]
    settings = tmp_path / "protocol.yaml"
    settings.write_text(json.dumps(protocol(max_steps=2, lrs=[1e-3], seeds=[0]).model_dump(mode="json")))
    for seed in (0, 5):  # a run of its grid (reused), then one outside every grid
        api.finetune(tiny_checkpoint, task_yaml, lr=1e-3, seed=seed, protocol=settings, out=out, log=lambda m: None)
        again = json.loads(file.read_text())
        assert {name: t["grid"] for name, t in again["tasks"].items()} == {n: _grid(s) for n, s in grids.items()}
        assert again["tasks"]["task"]["test_by_seed"] == written["tasks"]["task"]["test_by_seed"]
        assert again["tasks"]["other"] == written["tasks"]["other"] and again["protocol"]["seeds"] == [seed]


def test_a_summary_json_without_task_grids_is_read_under_its_protocols_grid(tmp_path, tiny_checkpoint, task_yaml):
    """A summary.json written before its entries named their grid: its top-level protocol's grid is every task's,
    for the card and for the next sweep, which keeps it as that task's grid when another task is swept."""
    from encoderlab.hub.card import evaluation_lines, evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    other = task_yaml.with_name("other.yaml")
    other.write_text(task_yaml.read_text())
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    first = run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    file = out / first["tag"] / first["protocol_key"] / "summary.json"
    written = json.loads(file.read_text())
    for entry in written["tasks"].values():
        entry.pop("grid", None)  # as the previous encoderlab wrote it
    file.write_text(json.dumps(written))
    (card,) = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out)
    assert card["grids"] == {"task": ([1e-3], [0, 1])}
    assert f"Protocol `{first['protocol_key']}`, LRs 0.001 x seeds 0, 1 (" in "\n".join(evaluation_lines([card]))
    run_sweep(tiny_checkpoint, [str(other)], protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1, 2]), out, **quiet)
    tasks = json.loads(file.read_text())["tasks"]
    assert {name: t["seeds"] for name, t in tasks.items()} == {"task": 2, "other": 3}
    assert {name: t["grid"] for name, t in tasks.items()} == {"task": _grid([0, 1]), "other": _grid([0, 1, 2])}
    assert tasks["task"]["test_by_seed"] == written["tasks"]["task"]["test_by_seed"]


def test_the_card_names_each_tasks_grid_where_they_differ(tmp_path, tiny_checkpoint, task_yaml):
    """One summary.json of two tasks swept over other seeds: the card's entry names no one grid but each task's."""
    from encoderlab.hub.card import evaluation_lines, evaluation_summaries
    from encoderlab.runs import checkpoint as ckpt

    other = task_yaml.with_name("other.yaml")
    other.write_text(task_yaml.read_text())
    out, quiet = tmp_path / "evals", {"show_progress": False, "log": lambda m: None}
    run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1]), out, **quiet)
    done = run_sweep(tiny_checkpoint, [str(other)], protocol(max_steps=2, lrs=[1e-3], seeds=[0, 1, 2]), out, **quiet)
    (card,) = evaluation_summaries(ckpt.resolve(tiny_checkpoint), out)
    assert card["grid"] is None and card["grids"] == {"other": ([1e-3], [0, 1, 2]), "task": ([1e-3], [0, 1])}
    text = "\n".join(evaluation_lines([card]))
    assert f"Protocol `{done['protocol_key']}`, each task's own grid (" in text
    assert "Runs counted per task: `other` LRs 0.001 x seeds 0, 1, 2; `task` LRs 0.001 x seeds 0, 1." in text


def test_a_sweep_writes_its_records_with_the_collector_paused_and_restores_it(tmp_path, tiny_checkpoint, task_yaml,
                                                                              monkeypatch):
    """Python's cyclic collector is off from a sweep's first run to its last record (finetuning/training.py
    `collector_paused`: a run's end would start a full pass), on again after, an interrupted sweep included."""
    import gc

    states, real = [], sweep_module.Sweep.write
    monkeypatch.setattr(sweep_module.Sweep, "write", lambda self, *a: states.append(gc.isenabled()) or real(self, *a))
    run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path / "evals", show_progress=False,
              log=lambda m: None)
    assert states == [False] * 4 and gc.isenabled()
    monkeypatch.setattr(sweep_module, "finetune", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny_checkpoint, [str(task_yaml)], protocol(), tmp_path / "other", show_progress=False,
                  log=lambda m: None)
    assert gc.isenabled()
