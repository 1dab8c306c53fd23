"""DDP and FSDP2 of a continued transformers model (a tiny BERT, model/transformers_mlm.py) on CPU (gloo, 2
processes): the same losses and weights as one process. Its dropout is off here: with dropout on, each rank draws its
own masks (seeded from seed, step and rank), so runs over other numbers of processes drop other units, as
transformers' Trainer does; a resume at the same world size stays exact (tests/faults/test_continued_pretraining.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file
from test_parallel import RTOL, STEPS, _free_port, assert_same_records, records

from conftest import built_once
from encoderlab.core.config import validate
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_continued_pretraining import packed_with, write_masked_lm  # noqa: E402


def make_config(root: Path, name: str, **train) -> PretrainConfig:
    data = {"name": name, "out_dir": str(root / "runs"), "data": {"path": str(root / "packed")},
            "init": {"from_weights": str(root / "bert")}, "objective": "mlm30",
            "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 2},
            "train": {"steps": STEPS, "global_batch": 4, "micro_batch": 1, "dtype": "fp32", "log_every": 1,
                      "eval_every": 3, "eval_batches": 1, "tensorboard": False, "threads": 1, **train}}
    return validate(PretrainConfig, data, name)


def _two_process_runs(rank: int, world: int, port: int, root: Path) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    for name in ("ddp", "fsdp2"):
        Trainer(make_config(root, name, parallel=name), show_progress=False, log=lambda m: None).run()


def _train_all(root: Path) -> None:
    packed_with(write_masked_lm(root / "bert", "bert", dropout=False), root / "packed")
    mp.spawn(_two_process_runs, args=(2, _free_port(), root), nprocs=2, join=True)
    before = torch.get_num_threads()
    try:
        Trainer(make_config(root, "single"), show_progress=False, log=lambda m: None).run()
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return built_once(tmp_path_factory, "parallel-continued", _train_all)


@pytest.mark.parametrize("name", ["ddp", "fsdp2"])
def test_two_processes_continue_a_bert_as_one_does(root, name):
    state = checkpoint.load_state(checkpoint.latest(root / "runs" / name))
    assert state["config"]["train"]["parallel"] == name
    assert_same_records(records(root / "runs" / name), records(root / "runs" / "single"))
    final = checkpoint.checkpoint_name(STEPS)
    a, b = (load_file(str(root / "runs" / run / "checkpoints" / final / checkpoint.WEIGHTS))
            for run in (name, "single"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=RTOL, atol=1e-6, msg=k)
