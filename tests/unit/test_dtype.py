"""`dtype: auto` (runs/optim.py `resolve_dtype`): bf16 where the device multiplies bf16 natively, fp32 elsewhere,
resolved when a config is read so that run folders and records hold what ran; an explicit bf16 where it is not
native runs, after a line that says so."""
from __future__ import annotations

import pytest
import torch

from encoderlab.finetune.protocol import Protocol
from encoderlab.pretrain.config import TrainSection
from encoderlab.runs import optim


@pytest.fixture(params=[True, False], ids=["native-bf16", "no-native-bf16"])
def native(request, monkeypatch):
    monkeypatch.setattr(optim, "bf16_is_native", lambda device_type: request.param)
    return request.param


def test_auto_is_resolved_when_the_config_is_read(native):
    want = "bf16" if native else "fp32"
    train = TrainSection(steps=10, global_batch=8, device="cpu", dtype="auto")
    assert train.dtype == want and train.model_dump()["dtype"] == want
    assert Protocol(dtype="auto").dtype == want
    for explicit in ("bf16", "fp32"):  # what the user names is what runs
        assert TrainSection(steps=10, global_batch=8, device="cpu", dtype=explicit).dtype == explicit
        assert Protocol(dtype=explicit).dtype == explicit
    assert Protocol(dtype="auto", weights="bf16").dtype == "bf16"  # bf16 weights compute in bf16


def test_explicit_bf16_where_it_is_not_native_is_said(native):
    cpu = torch.device("cpu")
    note = optim.slow_dtype_note("train.dtype", "bf16", cpu)
    if native:
        assert note is None
    else:
        assert note.startswith("train.dtype: bf16 has no native matrix kernels on this cpu") and "auto" in note
    assert optim.slow_dtype_note("train.dtype", "fp32", cpu) is None


def test_this_machine_answers():
    assert optim.resolve_dtype("auto", "cpu") in ("bf16", "fp32")
    assert optim.bf16_is_native("cpu") == (optim.resolve_dtype("auto", "cpu") == "bf16")
