"""`dtype: auto` (runs/optim.py `resolve_dtype`): bf16 where the device multiplies bf16 natively, fp32 elsewhere,
resolved when a config is read so that run folders and records hold what ran; an explicit bf16 where it is not
native runs, after a line that says so."""
from __future__ import annotations

import pytest
import torch

from encoderlab.finetuning.protocol import Protocol
from encoderlab.pretraining.config import TrainSection
from encoderlab.runs import optim


@pytest.fixture(params=[True, False], ids=["native-bf16", "no-native-bf16"])
def native(request, monkeypatch):
    monkeypatch.setattr(optim, "bf16_is_native", lambda device: request.param)
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
    if not native:  # with bf16 weights `auto` resolves to bf16 too: the note does not suggest it
        assert "auto" not in optim.slow_dtype_note("dtype", "bf16", cpu, auto_helps=False)


def test_a_study_says_what_its_jobs_would_say_in_its_quiet_workers(native):
    """A study's jobs log nowhere (their workers are quiet), so the study says their dtype lines once, before it
    trains: bf16 asked for where it is not native, and fp32 chosen by `auto` on a CPU (where the README's times,
    measured with native bf16, do not hold). Only for jobs it will run."""
    from types import SimpleNamespace

    from encoderlab.study.jobs import EvalJob, PretrainJob
    from encoderlab.study.runner import dtype_notes

    def pretrain(dtype: str) -> PretrainJob:
        job = PretrainJob.__new__(PretrainJob)  # only its config is read
        job.config = SimpleNamespace(train=TrainSection(steps=10, global_batch=8, device="cpu", dtype=dtype))
        return job

    def sweep(dtype: str) -> EvalJob:
        job = EvalJob.__new__(EvalJob)
        job.protocol = Protocol(dtype=dtype)
        return job

    auto = dtype_notes([pretrain("auto"), pretrain("auto"), sweep("auto")])
    bf16 = dtype_notes([pretrain("bf16"), sweep("bf16"), sweep("bf16")])
    if native:
        assert auto == [] and bf16 == []
    else:
        assert len(auto) == 1 and auto[0].startswith("train.dtype: auto runs in fp32 here: this CPU has no native")
        assert "42-46 minutes" in auto[0] and optim._bf16_needs(torch.device("cpu")) in auto[0]
        assert [n.split(":")[0] for n in bf16] == ["train.dtype", "dtype"]
        assert all("bf16 has no native matrix kernels" in n for n in bf16)
    assert dtype_notes([pretrain("fp32"), sweep("fp32")]) == []  # fp32 by name: what the user asked for
    assert dtype_notes([]) == []


def test_a_resume_refused_for_its_dtype_names_what_auto_does():
    from encoderlab.pretraining.resume import _describe_changes

    said = _describe_changes({"train.dtype": "bf16"}, {"train.dtype": "fp32"}, ["train.dtype"])
    assert said.startswith("train.dtype: 'bf16' -> 'fp32' (`auto` takes bf16 only where")


def test_this_machine_answers():
    assert optim.resolve_dtype("auto", "cpu") in ("bf16", "fp32")
    assert optim.bf16_is_native("cpu") == (optim.resolve_dtype("auto", "cpu") == "bf16")
    assert TrainSection(steps=10, global_batch=8, device="cpu", dtype="auto").dtype_asked == "auto"


def test_the_cpu_answer_agrees_with_its_instruction_set():
    """On x86 Linux, read against /proc/cpuinfo: AVX-512 (BW, VL, DQ) gives oneDNN bf16 kernels; a CPU with none of
    AVX-512 BW, AMX-BF16 or AVX-NE-CONVERT (this project's AVX2-only EPYC) has none."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    if {"avx512bw", "avx512vl", "avx512dq"} <= set(flags):
        assert optim.bf16_is_native("cpu")
    elif not {"avx512bw", "amx_bf16", "avx_ne_convert"} & set(flags):
        assert not optim.bf16_is_native("cpu")
    else:
        pytest.skip("an instruction set between the two cases")


def test_a_bf16_run_where_bf16_is_not_native_says_so_once(tmp_path, packed_dir, monkeypatch):
    """The trainer says the note once it goes ahead (a refused run says only why it was refused)."""
    from conftest import TINY_MODEL
    from encoderlab.core.config import validate
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    monkeypatch.setattr(optim, "bf16_is_native", lambda device: False)
    cfg = validate(PretrainConfig, {
        "name": "run", "out_dir": str(tmp_path), "data": {"path": str(packed_dir)}, "model": TINY_MODEL,
        "objective": "clm", "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 1, "global_batch": 2, "device": "cpu", "dtype": "bf16", "tensorboard": False}}, "test")
    said = []
    Trainer(cfg, log=said.append, show_progress=False)
    assert [line for line in said if "no native matrix kernels" in line] == [optim.slow_dtype_note(
        "train.dtype", "bf16", torch.device("cpu"))]
