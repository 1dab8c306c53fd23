"""Weights & Biases logging in W&B's offline mode (nothing goes over the network): a tiny pretraining and a sweep
each write an offline run whose history holds what metrics.jsonl and the sweep's records hold."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import wandb
from wandb.proto import wandb_internal_pb2

from encoderlab.core.config import validate
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs.logging import read_metrics

BLOCK, HEADER = 32768, 7  # the .wandb file: LevelDB's log format behind a 7-byte ":W&B" header


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """W&B's own folders (settings, cache, artifacts) in the test's folder; offline where a config sets no mode."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))


def offline_run(folder: Path) -> dict:
    """The one offline run under `folder`/wandb: {"run": its run record, "history": rows, "summary": merged}."""
    wandb.teardown()  # finish() leaves the writing to W&B's service process; its shutdown flushes the file
    [path] = (folder / "wandb").glob("offline-run-*/run-*.wandb")
    data, pos, chunk, out = path.read_bytes(), HEADER, b"", {"history": [], "summary": {}}
    assert data[:4] == b":W&B"
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record.FromString(chunk)
            chunk, what = b"", record.WhichOneof("record_type")
            if what == "run":
                out["run"] = record.run
            elif what == "history":
                out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                       for i in record.history.item})
            elif what == "summary":
                out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                       for i in record.summary.update})
    return out


def pretrain(packed: Path, out: Path, **train) -> Path:
    cfg = validate(PretrainConfig, {
        "name": "tiny", "out_dir": str(out), "data": {"path": str(packed)}, "objective": "clm:50%,mlm40:50%",
        "model": {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "num_key_value_heads": 1},
        "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 4, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                  "tensorboard": False, **train}}, "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run()
    return out / "tiny"


def test_pretraining_writes_its_metrics_to_an_offline_run(tmp_path, packed_dir, one_thread):
    # no `mode`: W&B's own setting decides, here the fixture's WANDB_MODE=offline
    run_dir = pretrain(packed_dir, tmp_path, tensorboard=True, wandb={"project": "encoderlab-test", "name": "tiny-wb"})
    run = offline_run(run_dir)
    assert (run["run"].project, run["run"].display_name) == ("encoderlab-test", "tiny-wb")
    config = {i.key: json.loads(i.value_json) for i in run["run"].config.update}
    assert config["train"]["steps"] == 4 and config["objective"] == "clm:50%,mlm40:50%"
    metrics = read_metrics(run_dir / "metrics.jsonl")
    assert [row["_step"] for row in run["history"]] == [m["step"] for m in metrics] == [1, 2, 3, 4]
    for row, record in zip(run["history"], metrics):
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        assert {"clm/loss", "lr", "tokens_per_s"} & numbers.keys() and {k: row[k] for k in numbers} == numbers
    held_out = {k: v for k, v in metrics[-1].items() if k.startswith("val/")}
    assert held_out and {k: run["summary"][k] for k in held_out} == held_out
    assert list((run_dir / "tensorboard").iterdir())  # both sinks wrote


def test_sweep_writes_each_run_and_the_summary_to_an_offline_run(tmp_path, packed_dir, classification_task,
                                                                  one_thread):
    checkpoint = pretrain(packed_dir, tmp_path / "runs")
    task = classification_task(tmp_path / "task")
    protocol = Protocol(name="t", max_steps=2, batch_size=4, eval_batch_size=8, lrs=[1e-3, 3e-3], seeds=[0],
                        max_length=16, dtype="fp32",
                        wandb={"project": "encoderlab-test", "name": "sweep", "mode": "offline"})
    summary = run_sweep(checkpoint, [str(task)], protocol, tmp_path / "evals", log=lambda message: None,
                        show_progress=False, engine="sequential")
    [(name, result)] = summary["tasks"].items()
    run = offline_run(tmp_path / "evals")
    assert run["run"].display_name == "sweep"
    recorded = {r["lr"]: r["scores"]["test"]["score"] for r in records.load_all(tmp_path / "evals", summary["tag"],
                                                                                summary["protocol_key"])}
    assert {row[f"runs/{name}/lr"]: row[f"runs/{name}/test"] for row in run["history"]} == recorded
    assert sorted(recorded) == [1e-3, 3e-3]
    assert run["summary"][f"{name}/test"] == result["test"] and run["summary"][f"{name}/best_lr"] == result["best_lr"]
    # reporting only: the protocol's key (the records' folder) is the one it had before `wandb` existed
    assert summary["protocol_key"] == records.protocol_key(
        {k: v for k, v in protocol.model_dump(mode="json").items() if k != "wandb"})
