"""The planner's FLOPs: what each run's objective schedule costs, as the plan table and the GPU-hours state it."""
from __future__ import annotations

import pytest
import yaml

from encoderlab.study.plan import build_plan
from encoderlab.study.spec import load_study


def plan_for(tmp_path, objectives):
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": "nowhere"}, "model": {"preset": "micro"}, "optim": {"lr": 3e-3},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32", "tensorboard": False}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 4, "batch_size": 8, "lrs": [1e-3], "seeds": [0], "max_length": 32}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 20,
        "models": [{"sizes": ["micro"], "objectives": objectives}],
        "evaluation": {"protocol": "protocol.yaml", "tasks": ["rt-polarity"]},
        "data_shape": {"vocab_size": 320, "seq_len": 64}}))
    spec, base = load_study(tmp_path / "study.yaml")
    return build_plan(spec, base)


def test_a_mix_costs_its_members_flops_weighted_as_it_draws_them(tmp_path):
    # mix(clm=1,mlm40=3) trains CLM on a quarter of its steps and MLM 40% on three quarters (objectives.Mix.pick)
    runs = plan_for(tmp_path, ["mix(clm=1,mlm40=3)", "clm", "mlm40"]).runs
    clm, mlm = runs["micro-clm-20"].flops, runs["micro-mlm40-20"].flops
    assert clm != pytest.approx(mlm)
    mixed = runs["micro-mix(clm=1,mlm40=3)-20"]
    assert mixed.flops == pytest.approx(0.25 * clm + 0.75 * mlm, rel=1e-12)
    assert mixed.naive_flops == pytest.approx(mixed.flops, rel=1e-12)
