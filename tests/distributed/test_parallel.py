"""DDP and FSDP2 on CPU (gloo, 2 processes): the same losses as one process, checkpoints across world sizes.

Both processes are started once per module (torch.multiprocessing.spawn, with torchrun's environment variables) and
train every two-process run the tests below check; the single-process references run here. Tiny model, fp32, one
thread per process. Tolerance: relative 1e-5 (absolute 1e-6 for weights), since gradients are summed over ranks in
another order than over one batch; measured differences are ~1e-7.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
import yaml
from conftest import built_once
from safetensors.torch import load_file

from encoderlab.core.config import ConfigError, validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.process import run_lock
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.distributed import DistributedError
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

# A tied LM head: FSDP2 must shard the embedding and the head as one parameter.
TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": True}
STEPS = 6
RTOL, ATOL = 1e-5, 1e-6


def make_config(out_dir, packed_dir, name, **train) -> PretrainConfig:
    # Both objectives (CLM then MLM masks), two micro-batches per rank, held-out loss at steps 3 and 6.
    data = {"name": name, "out_dir": str(out_dir), "data": {"path": str(packed_dir)}, "model": TINY,
            "objective": "clm:2,mlm40:rest", "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 2},
            "train": {"steps": STEPS, "global_batch": 4, "micro_batch": 1, "dtype": "fp32", "log_every": 1,
                      "eval_every": 3, "eval_batches": 1, "tensorboard": False, "threads": 1, **train}}
    return validate(PretrainConfig, data, name)


def _two_process_runs(rank: int, world: int, port: int, packed_dir, out_dir) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    quiet = {"show_progress": False, "log": lambda m: None}
    for name, train in (("ddp", {"parallel": "ddp"}), ("fsdp2", {"parallel": "fsdp2"}),
                        ("fsdp2-ac", {"parallel": "fsdp2", "activation_checkpointing": True})):
        Trainer(make_config(out_dir, packed_dir, name, **train), **quiet).run()
    # Killed after step 3: the last checkpoint is step 2's, written by FSDP2 in DCP shards.
    cut = make_config(out_dir, packed_dir, "cut", parallel="fsdp2", save_every=2)
    Trainer(cut, **quiet).run(stop_at=3)
    # A DDP run's checkpoint (whole tensors in dcp/, written once for both replicas) continued under FSDP2.
    Trainer(make_config(out_dir, packed_dir, "switch", parallel="ddp", save_every=2), **quiet).run(stop_at=2)
    if rank == 0:  # copies for the other resumes, taken before the two-process resume writes on
        for copy in ("cut-resumed-plain", "cut-resumed-fsdp2", "cut-resumed-ddp"):
            shutil.copytree(out_dir / "cut", out_dir / copy)
    Trainer(cut, resume=True, **quiet).run()
    Trainer(make_config(out_dir, packed_dir, "cut-resumed-ddp", parallel="ddp", save_every=2), resume=True,
            **quiet).run()
    Trainer(make_config(out_dir, packed_dir, "switch", parallel="fsdp2", save_every=2), resume=True, **quiet).run()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, packed_dir):
    """The run folders: two-process runs from the spawned workers, single-process ones from here. Under xdist the
    workers share them (conftest `built_once`): the processes are spawned once, not once per worker."""
    return built_once(tmp_path_factory, "parallel-runs", lambda out: _train_all(out, packed_dir))


def _train_all(out, packed_dir) -> None:
    mp.spawn(_two_process_runs, args=(2, _free_port(), packed_dir, out), nprocs=2, join=True)
    before = torch.get_num_threads()
    try:
        Trainer(make_config(out, packed_dir, "single"), show_progress=False, log=lambda m: None).run()
        Trainer(make_config(out, packed_dir, "cut-resumed-plain"), resume=True, show_progress=False,
                log=lambda m: None).run()
        # parallel=fsdp2 without torchrun: a process group of one, resharding the two processes' DCP checkpoint.
        Trainer(make_config(out, packed_dir, "cut-resumed-fsdp2", parallel="fsdp2"), resume=True,
                show_progress=False, log=lambda m: None).run()
    finally:
        torch.set_num_threads(before)


def records(run_dir) -> list[dict]:
    """Per-step numbers of metrics.jsonl, minus timing."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def assert_same_records(got: list[dict], expected: list[dict]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in expected] == list(range(1, STEPS + 1))
    for g, e in zip(got, expected):
        assert g.keys() == e.keys()
        for key, value in e.items():
            if isinstance(value, str):
                assert g[key] == value, (g["step"], key)
            else:
                assert g[key] == pytest.approx(value, rel=RTOL, abs=ATOL if "accuracy" in key else 0), (g["step"], key)


def assert_same_weights(run_a, run_b) -> None:
    name = checkpoint.checkpoint_name(STEPS)
    a = load_file(str(run_a / "checkpoints" / name / "model.safetensors"))
    b = load_file(str(run_b / "checkpoints" / name / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=RTOL, atol=ATOL, msg=k)


@pytest.mark.parametrize("name", ["ddp", "fsdp2"])
def test_two_processes_give_the_single_process_losses(runs, name):
    # Losses, accuracies, grad norms, predicted tokens and held-out losses of every step, and the final weights.
    assert_same_records(records(runs / name), records(runs / "single"))
    assert any("val/loss_mlm40" in r for r in records(runs / name))
    assert_same_weights(runs / name, runs / "single")


def test_activation_checkpointing_gives_the_same_losses(runs, packed_dir, tmp_path):
    assert_same_records(records(runs / "fsdp2-ac"), records(runs / "fsdp2"))
    Trainer(make_config(tmp_path, packed_dir, "ac", activation_checkpointing=True), show_progress=False,
            log=lambda m: None).run()
    assert records(tmp_path / "ac") == records(runs / "single")  # in one process, recomputation is bit-exact


def test_fsdp2_checkpoint_holds_shards_and_consolidated_weights(runs):
    folder = runs / "fsdp2" / "checkpoints" / checkpoint.checkpoint_name(STEPS)
    assert (folder / "dcp" / ".metadata").exists() and not (folder / "optimizer.pt").exists()
    assert not list((runs / "fsdp2" / "checkpoints").glob(".*"))  # no temporary folder left behind
    model, cfg, tok = checkpoint.load_model(runs / "fsdp2")  # what fine-tuning and export read
    expected = load_file(str(runs / "single" / "checkpoints" / folder.name / "model.safetensors"))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, expected[k], rtol=RTOL, atol=ATOL, msg=k)
    assert model.lm_head.weight is model.model.embed_tokens.weight and tok.vocab_size == cfg.vocab_size


@pytest.mark.parametrize("name", ["cut", "cut-resumed-plain", "cut-resumed-fsdp2", "cut-resumed-ddp", "switch"])
def test_resume_in_one_or_two_processes_equals_no_interruption(runs, name):
    # From FSDP2 on 2 processes, cut: to FSDP2 on 2; cut-resumed-plain / -fsdp2: to 1 process (plain, or FSDP2 in a
    # group of one); cut-resumed-ddp: to DDP on 2. switch: from DDP to FSDP2, on 2 processes.
    assert checkpoint.load_state(runs / name / "checkpoints" / "step-0000002")["step"] == 2
    assert_same_records(records(runs / name), records(runs / "single"))
    assert_same_weights(runs / name, runs / "single")


def test_bad_parallel_settings_fail_clearly(tmp_path, packed_dir, monkeypatch):
    from encoderlab.model.presets import preset
    from encoderlab.pretraining import objectives
    from encoderlab.pretraining.setup import check_compatible

    with pytest.raises(ConfigError, match=r"train\.parallel"):
        make_config(tmp_path, packed_dir, "x", parallel="fsdp")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DistributedError, match="sets WORLD_SIZE but not RANK, LOCAL_RANK"):
        Trainer(make_config(tmp_path, packed_dir, "x", parallel="ddp"), show_progress=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(DistributedError, match="WORLD_SIZE=2 but train.parallel='none'.*parallel=ddp or fsdp2"):
        Trainer(make_config(tmp_path, packed_dir, "x"), show_progress=False)
    assert not (tmp_path / "x").exists()
    cfg = make_config(tmp_path, packed_dir, "x", micro_batch=2)
    meta = {"seq_len": 64, "tokenizer": {"mask_id": 3, "vocab_size": 320}, "max_token_id": 319}
    phases = objectives.Schedule.parse("clm").phases(10)
    with pytest.raises(EncoderlabError, match="4 sequences cannot be split evenly over 3 processes"):
        check_compatible(cfg, preset("tiny", vocab_size=320), meta, phases, world_size=3)
    with pytest.raises(EncoderlabError, match="micro_batch=2 does not divide the 1 sequences of each of the 4"):
        check_compatible(cfg, preset("tiny", vocab_size=320), meta, phases, world_size=4)


def test_torchrun_launch_of_the_cli(tmp_path, packed_dir):
    """The real launcher: torchrun's environment and rendezvous, rank 0 alone printing the plan and summary."""
    cfg = make_config(tmp_path, packed_dir, "cli", steps=3, eval_every=0).model_dump(mode="json")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "encoderlab.cli", "pretrain", str(tmp_path / "run.yaml"), "--set", "train.parallel=fsdp2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done    3 steps") == 1 and done.stdout.count("model   2 layers") == 1
    assert (tmp_path / "cli" / "checkpoints" / "step-0000003" / "dcp" / ".metadata").exists()
    assert [r["step"] for r in records(tmp_path / "cli")] == [1, 2, 3]


def test_a_diverging_run_stops_on_every_rank(tmp_path, packed_dir):
    """The divergence check agrees over ranks: both processes stop at the same step with the one-line error (a rank
    that went on would hang in its next collective), and no checkpoint is written after the last finite one."""
    cfg = make_config(tmp_path, packed_dir, "nan", save_every=1, eval_every=0).model_dump(mode="json")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**cfg, "optim": {**cfg["optim"], "lr": 1e6}}))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "encoderlab.cli", "pretrain", str(tmp_path / "run.yaml"), "--set", "train.parallel=ddp"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: pretraining diverged at step")]
    assert done.returncode != 0 and len(errors) == 2 and errors[0] == errors[1], done.stderr[-3000:]
    kept = sorted(p.name for p in (tmp_path / "nan" / "checkpoints").glob("step-*"))
    step = int(errors[0].split("at step ")[1].split()[0])
    assert kept == [checkpoint.checkpoint_name(s) for s in range(1, step)]


def _ranks_with_other_lrs(rank: int, world: int, port: int, packed_dir, out_dir) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cfg = make_config(out_dir, packed_dir, "lrs", parallel="ddp").model_dump(mode="json")
    cfg["optim"]["lr"] = 1e-3 if rank == 0 else 2e-3  # rank 1 launched with another --set optim.lr
    try:
        Trainer(validate(PretrainConfig, cfg, "lrs"), show_progress=False, log=lambda m: None).run()
        said = "trained"
    except DistributedError as exc:
        said = str(exc)
    (out_dir / f"rank{rank}.txt").write_text(said)


def test_ranks_with_different_configs_all_stop_naming_the_keys(tmp_path, packed_dir):
    mp.spawn(_ranks_with_other_lrs, args=(2, _free_port(), packed_dir, tmp_path), nprocs=2, join=True)
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert said[0] == said[1] and "\n" not in said[0], said
    assert said[0].startswith("the 2 torchrun processes resolved different configs, so none started: optim.lr "
                              "(rank 0: 0.001, rank 1: 0.002); launch every rank with the same config"), said[0]
    assert not (tmp_path / "lrs").exists()  # refused before the run folder was made


@pytest.mark.slow
def test_compiled_blocks_give_the_same_losses(runs, packed_dir, tmp_path):
    """10 to 40 s on 2 busy cores (inductor compiling the block's forward and backward, less with its cache)."""
    Trainer(make_config(tmp_path, packed_dir, "compiled", compile=True), show_progress=False,
            log=lambda m: None).run()
    assert_same_records(records(tmp_path / "compiled"), records(runs / "single"))
    assert_same_weights(tmp_path / "compiled", runs / "single")


def _ranks_over_a_refused_run_dir(rank: int, world: int, port: int, packed_dir, out_dir) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    said = []
    for resume, batch in ((True, 8), (False, 4)):  # a resume with another global batch; a folder being written
        try:
            Trainer(make_config(out_dir, packed_dir, "held", parallel="ddp", global_batch=batch), resume=resume,
                    show_progress=False, log=lambda m: None)
            said.append("started")
        except EncoderlabError as exc:
            said.append(str(exc))
    (out_dir / f"rank{rank}.txt").write_text("\n".join(said))
    torch.distributed.barrier()  # both ranks leave together: gloo aborts a process whose peer closed first


def test_a_run_folder_refused_by_rank_0_stops_every_rank_with_its_line(tmp_path, packed_dir):
    """Rank 0 alone checks the run folder: the other ranks must stop with its line, not crash in a collective."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "config.yaml").write_text(yaml.safe_dump(make_config(tmp_path, packed_dir, "held").model_dump(mode="json")))
    with run_lock(held, "a pretraining run"):  # this process writes there
        before = {p.name: p.read_bytes() for p in held.iterdir() if p.name != ".lock"}
        mp.spawn(_ranks_over_a_refused_run_dir, args=(2, _free_port(), packed_dir, tmp_path), nprocs=2, join=True)
    said = [(tmp_path / f"rank{r}.txt").read_text().splitlines() for r in range(2)]
    assert said[0] == said[1], said
    assert "train.global_batch: 4 -> 8" in said[0][0] and f"process {os.getpid()} " in said[0][1], said
    assert {p.name: p.read_bytes() for p in held.iterdir() if p.name != ".lock"} == before


def _ranks_where_one_refuses(rank: int, world: int, port: int, refuser: int, out_dir) -> None:
    import datetime

    from encoderlab.pretraining import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    said = "went on"
    try:
        with distributed.follow_main(distributed.World(rank=rank, size=world)):
            if rank == refuser:
                raise EncoderlabError(f"rank {rank} refuses")
    except EncoderlabError as exc:
        said = str(exc)
    (out_dir / f"rank{rank}.txt").write_text(said)
    torch.distributed.barrier()  # both ranks leave together: gloo aborts a process whose peer closed first
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("refuser", [0, 1])
def test_a_refusal_on_any_one_rank_stops_every_rank_with_its_line(tmp_path, refuser):
    """A rank other than 0 that refused left at once, while rank 0 waited in the broadcast for it: a hang until
    gloo's timeout, then a traceback, instead of its line on every rank."""
    mp.spawn(_ranks_where_one_refuses, args=(2, _free_port(), refuser, tmp_path), nprocs=2, join=True)
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == [f"rank {refuser} refuses"] * 2
