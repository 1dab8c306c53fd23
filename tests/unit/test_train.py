"""The pretraining loop: resume equals no interruption, phases, checkpoints, LR schedules, config errors."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from encoderlab.config import ConfigError, apply_overrides, validate
from encoderlab.errors import EncoderlabError
from encoderlab.train import checkpoint
from encoderlab.train.config import PretrainConfig
from encoderlab.train.loop import Trainer
from encoderlab.train.schedule import LRSchedule

TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}


def make_config(tmp_path, packed_dir, **over) -> PretrainConfig:
    data = {
        "name": over.pop("name", "run"), "out_dir": str(tmp_path), "data": {"path": str(packed_dir)},
        "model": TINY, "objective": over.pop("objective", "mlm40"),
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 3},
        "train": {"steps": 10, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                  "tensorboard": False, **over},
    }
    return validate(PretrainConfig, data, "test")


def weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / checkpoint.checkpoint_name(step) / "model.safetensors"))


def test_resume_equals_no_interruption(tmp_path, packed_dir):
    schedule = "clm:40%,mlm40:60%"
    Trainer(make_config(tmp_path, packed_dir, name="straight", objective=schedule), show_progress=False).run()
    # Killed after step 7: the last checkpoint is the periodic one of step 6, so step 7 is redone on resume.
    cut = make_config(tmp_path, packed_dir, name="cut", objective=schedule, save_every=3)
    Trainer(cut, show_progress=False).run(stop_at=7)
    assert checkpoint.latest(tmp_path / "cut").name == "step-0000006"
    resumed = Trainer(make_config(tmp_path, packed_dir, name="cut", objective=schedule, save_every=3),
                      show_progress=False, resume=True)
    assert resumed.step == 6
    resumed.run()
    a, b = weights(tmp_path / "straight", 10), weights(tmp_path / "cut", 10)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    steps = [json.loads(x)["step"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # the record of the redone step 7 is not duplicated


def test_checkpoints_at_phase_switch_stable_and_end(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, objective="clm:4,mlm40:rest")
    summary = Trainer(cfg, show_progress=False).run()
    reasons = {p.name: checkpoint.load_state(p)["reason"] for p in (tmp_path / "run" / "checkpoints").iterdir()}
    assert reasons == {"step-0000004": "phase", "step-0000007": "stable", "step-0000010": "final"}
    state = checkpoint.load_state(tmp_path / "run" / "checkpoints" / "step-0000004")
    assert state["objective"] == "mlm40" and state["data"]["samples_seen"] == 16
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in records] == ["clm"] * 4 + ["mlm40"] * 6
    assert all("clm/loss" in r for r in records[:4]) and all("mlm40/loss" in r for r in records[4:])
    assert "val/loss_mlm40" in records[-1] and math.isfinite(records[-1]["val/loss_mlm40"])
    assert summary["steps"] == 10


def test_training_lowers_the_loss(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=40, objective="clm")
    cfg.optim.lr = 3e-3
    Trainer(cfg, show_progress=False).run()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["clm/loss"] < records[0]["clm/loss"] - 1.0


def test_micro_batches_give_the_same_update(tmp_path, packed_dir):
    whole = Trainer(make_config(tmp_path, packed_dir, name="whole", steps=2), show_progress=False)
    split = Trainer(make_config(tmp_path, packed_dir, name="split", steps=2, micro_batch=1), show_progress=False)
    whole.run(), split.run()
    a, b = weights(tmp_path / "whole", 2), weights(tmp_path / "split", 2)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_existing_run_needs_resume(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False).run()
    with pytest.raises(EncoderlabError, match="--resume"):
        Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False)


def test_wsd_schedule_shape():
    s = LRSchedule(kind="wsd", warmup_steps=10, decay_steps=20)
    f = [s.factor(i, 100) for i in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0
    assert all(x == 1.0 for x in f[10:80])
    assert s.decay_start(100) == 80 and f[80] == 1.0 and f[99] == pytest.approx(1 / 20)
    assert all(a > b for a, b in zip(f[80:], f[81:]))
    sqrt = LRSchedule(kind="wsd", warmup_steps=0, decay_steps=4, decay_shape="1-sqrt")
    assert [round(sqrt.factor(i, 4), 4) for i in range(4)] == [1.0, 0.5, round(1 - math.sqrt(0.5), 4),
                                                                 round(1 - math.sqrt(0.75), 4)]
    cos = LRSchedule(kind="cosine", warmup_steps=0, min_lr_ratio=0.1)
    assert cos.factor(0, 100) == pytest.approx(1.0) and cos.factor(100, 100) == pytest.approx(0.1)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"train\.stepz: unknown key"):
        validate(PretrainConfig, {"train": {"steps": 1, "global_batch": 2, "stepz": 3}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"train\.micro_batch.*must divide"):
        validate(PretrainConfig, {"train": {"steps": 1, "global_batch": 4, "micro_batch": 3}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"lr_schedule\.kind"):
        validate(PretrainConfig, {"lr_schedule": {"kind": "exp"}, "train": {"steps": 1, "global_batch": 2}}, "x")
    data = apply_overrides({"train": {"steps": 1}}, ["train.steps=5", "optim.lr=3e-4", "objective=clm:25%,mlm:75%"])
    assert data == {"train": {"steps": 5}, "optim": {"lr": 3e-4}, "objective": "clm:25%,mlm:75%"}
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["train.steps"])
