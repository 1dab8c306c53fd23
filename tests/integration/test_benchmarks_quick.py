"""Benchmarks cannot rot: each script in benchmarks/ runs its quick mode here on tiny inputs, so an interface change
that breaks one fails the default suite. Structure only: the numbers of a smoke run are noise and no timing is
asserted (gpu_check.py has its own smoke test, tests/unit/test_gpu_check.py)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import TINY_MODEL
from encoderlab.core.config import validate
from encoderlab.model import attention
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import continued_mlm_throughput  # noqa: E402
import prepare_throughput  # noqa: E402
import pretrain_throughput  # noqa: E402
import sweep_throughput  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


def test_continued_mlm_throughput_quick(capsys):
    continued_mlm_throughput.main(["--quick", "--json", "--models", "bert"])
    out = json.loads(capsys.readouterr().out)
    (row,) = out["results"]
    assert row["model_type"] == "bert" and "documents stay apart by" in row["layout"]
    assert row["encoderlab"]["tokens_per_s"] > 0 and row["transformers"]["tokens_per_s"] > 0 and row["ratio"] > 0


def test_pretrain_throughput_quick(capsys):
    pretrain_throughput.main(["--quick", "--no-memory", "--json", "--device", "cpu"])
    out = json.loads(capsys.readouterr().out)
    assert out["peak_tflops"] > 0 and out["device"] == "cpu" and out["dtype"] in ("bf16", "fp32")
    rows = out["results"]
    assert [(r["preset"], r["seq_len"], r["objective"]) for r in rows] == [("micro", 64, "mlm40"), ("micro", 64, "clm")]
    for row in rows:
        for impl in pretrain_throughput.IMPLEMENTATIONS:
            assert row[impl]["tokens_per_s"] > 0 and row[impl]["mfu"] >= 0
        assert row["ratio"] > 0


@pytest.mark.parametrize(("option", "form"), [([], "eager"), (["--eager-up-to", "0"], "flash")])
def test_pretrain_throughput_eager_up_to_sets_encoderlab_s_attention_form(capsys, monkeypatch, option, form):
    """--eager-up-to measures another form choice: 64-token windows run eager by default, flash when told."""
    monkeypatch.setattr(attention, "EAGER_MAX_LEN", attention.EAGER_MAX_LEN)  # the script sets it for its process
    forms = []
    attend = attention.attend
    monkeypatch.setattr(attention, "attend", lambda form, *args: forms.append(form) or attend(form, *args))
    pretrain_throughput.main(["--quick", "--no-memory", "--json", "--device", "cpu", *option])
    assert json.loads(capsys.readouterr().out)["eager_up_to"] == (int(option[1]) if option else attention.EAGER_MAX_LEN)
    assert forms and set(forms) == {form}


def test_the_baseline_trains_as_trainer_would(monkeypatch):
    """No KV cache: with transformers' default one each compiled Llama layer recompiled for its own cache entry, and
    past torch's recompile limit (8 layers) the rest ran eager. Fused AdamW: Trainer's default since torch 2.8."""
    fused = []
    adamw = torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", lambda *a, **k: fused.append(k.get("fused")) or adamw(*a, **k))
    for objective in ("clm", "mlm40"):
        shape = pretrain_throughput.Shape("micro", objective, 2, 64, dtype="fp32")
        model = pretrain_throughput.build("transformers", shape, torch.device("cpu"))[0]
        assert objective != "clm" or model.config.use_cache is False
    assert fused == [True, True]


def test_pretrain_throughput_peak_memory_counts_the_model():
    """The memory path in this process (the script runs it in a fresh one): weights, AdamW state and activations."""
    shape = pretrain_throughput.Shape("micro", "clm", 2, 64)
    for impl in pretrain_throughput.IMPLEMENTATIONS:
        assert pretrain_throughput._peak_memory_here(impl, shape, "cpu", 1) >= 0


def test_pretrain_throughput_profile_names_both_implementations():
    """--profile's table: a step's wall time for each implementation and its top operators."""
    text = pretrain_throughput.profile(pretrain_throughput.Shape("micro", "mlm40", 2, 64), 1, 3,
                                       pretrain_throughput.torch.device("cpu"))
    for impl in pretrain_throughput.IMPLEMENTATIONS:
        assert f"{impl} micro mlm40 compile=False: " in text
    assert text.count("Self CPU time total") == 2


def test_prepare_throughput_quick(tmp_path, monkeypatch):
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))  # no offline corpus there: synthetic sentences
    out = tmp_path / "prepare.json"
    prepare_throughput.main(["--quick", "--documents", "400", "--tokenizers", "llama3-shape", "--json", str(out)])
    results = json.loads(out.read_text())
    assert results["documents"] == 400
    row = results["tokenizers"]["llama3-shape"]
    assert row["one_process"]["tokens"] == row["two_processes"]["tokens"] >= row["join"]["tokens"] > 0
    assert row["one_process"]["tokens"] - row["join"]["tokens"] < 2048  # windows of 2,048: the rest is left over
    assert row["two_processes"]["processes"] == 2 and row["scaling"] > 0
    with pytest.raises(SystemExit, match="data prepare offline"):  # said, not a FileNotFoundError deep inside
        prepare_throughput.main(["--quick", "--documents", "40", "--tokenizers", "offline"])


@pytest.fixture(scope="module")
def micro_checkpoint(tmp_path_factory, packed_dir):
    out = tmp_path_factory.mktemp("runs")
    model = TINY_MODEL
    cfg = validate(PretrainConfig, {
        "name": "micro", "out_dir": str(out), "data": {"path": str(packed_dir)}, "model": model, "objective": "mlm40",
        "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "tensorboard": False}}, "test")
    Trainer(cfg, show_progress=False).run()
    return out / "micro"


def write_task(folder: Path) -> Path:
    rng = random.Random(0)
    folder.mkdir()
    for split, n in (("train", 24), ("dev", 8), ("test", 8)):
        rows = [{"text": f"the film was {rng.choice(['good', 'bad'])} and long", "label": rng.choice("ab")}
                for _ in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "task.yaml").write_text("name: films\nfamily: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\n"
                                      "test: test.jsonl\ntext_column: text\nlabel_column: label\n")
    return folder / "task.yaml"


def write_retrieval_task(folder: Path) -> Path:
    """BEIR layout: the baseline's data comes from the task's private fields, the likeliest part to break."""
    rng = random.Random(1)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    (folder / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(rng.choices(words, k=10)) for i in range(24)}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": docs[f"d{i}"][:20]}) + "\n"
                                                  for i in range(24)))
    for split, ids in (("train", range(0, 16)), ("dev", range(16, 20)), ("test", range(20, 24))):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{i}\td{i}\t1\n" for i in ids))
    (folder / "task.yaml").write_text("name: beir\nfamily: retrieval\nfolder: .\n")
    return folder / "task.yaml"


def test_sweep_throughput_quick_with_its_default_protocol(tmp_path, micro_checkpoint, capsys):
    """Both encoderlab engines and one Trainer run each (hf_finetune.py, in its own process) on a classification and
    a retrieval task, with the default protocol (paper.yaml: its judged corpus once made the script crash)."""
    out = tmp_path / "sweep.json"
    tasks = [str(write_task(tmp_path / "t")), str(write_retrieval_task(tmp_path / "r"))]
    sweep_throughput.main(["--quick", "--checkpoint", str(micro_checkpoint), "--tasks", *tasks,
                           "--engines", "sequential", "batched", "--hf-runs", "1", "--batch", "8", "--threads", "1",
                           "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["task"], r["family"]) for r in rows] == [("films", "classification"), ("beir", "retrieval")]
    for row in rows:
        for engine in ("sequential", "batched"):
            assert row[engine]["runs"] == 4 and row[engine]["failed"] == 0  # 2 LRs x 2 seeds
        assert row["transformers"]["runs"] == 1 and row["transformers"]["failed"] == 0
        assert row["transformers"]["mean_test"] is not None  # hf_finetune.py printed its scores line
    printed = capsys.readouterr().out
    assert "whole sweep" in printed and "batched / sequential" in printed


def test_the_sweeps_baseline_gets_the_protocols_settings(tmp_path, monkeypatch):
    """The default protocol (paper.yaml) resolves `max_length: auto` from the checkpoint's context (it crashed after
    encoderlab's side had run), and the Trainer baseline gets its weight dtype, batch order and allocator setting."""
    args = sweep_throughput.parse_args([])  # the defaults, not --quick (which sets its own length)
    protocol = sweep_throughput.build_protocol(args, 2048)
    assert protocol.length_for("classification") == 2028 and protocol.qa.format == "spans"
    commands = []

    def run(command, **kwargs):
        commands.append((command, kwargs["env"]))
        return subprocess.CompletedProcess(command, 1, "", "not run")

    monkeypatch.setattr(sweep_throughput.subprocess, "run", run)
    args.keep_freed, args.hf_runs = True, 1
    sweep_throughput.time_transformers(args, protocol, "classification", tmp_path, tmp_path)
    ((command, env),) = commands
    value = {name: command[command.index(name) + 1] for name in ("--max-length", "--weights", "--sampling")}
    assert value == {"--max-length": "2028", "--weights": "bf16", "--sampling": "random"}  # paper.yaml's
    assert env["MALLOC_MMAP_MAX_"] == "0"
