"""Failures fail, through the user's commands: a diverging pretraining run stops at its first bad step with exit code
1 and keeps its last finite checkpoint (nothing saved, so nothing pruned, after it); a study whose job fails exits 1
naming the job and its log, with or without `--job`, and names the jobs it skipped; a study file edited after its
runs started is refused, naming the changed keys, before anything is written; a sweep whose run raises does not end
as if it had finished.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import socket
import sys

import pytest
import torch
import yaml
from conftest import run_command
from runs import STEPS, TINY, config
from safetensors.torch import load_file

from encoderlab.core.config import validate
from encoderlab.core.errors import is_out_of_memory
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.divergence import Diverged, out_of_memory
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

DIVERGING_LR = 1e6  # the update after step 1 makes the weights, then the gradients, non-finite


def command(monkeypatch, capsys, *args) -> tuple[int, list[str], str]:
    """(exit code, error lines, stdout) of one `encoderlab` command run in this process."""
    code, out, err = run_command(monkeypatch, capsys, *args)
    assert "Traceback" not in err, err
    command.log = err  # the log lines (stderr), for a test that reads them
    return code, [line for line in err.splitlines() if line.startswith("error:")], out


def write_run(tmp_path, packed_dir, name, lr, **train):
    cfg = {**config(tmp_path, packed_dir, name, **train), "optim": {"lr": lr}}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / f"{name}.yaml"


def first_bad_step(run_dir) -> int:
    for record in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()):
        if not all(math.isfinite(v) for k, v in record.items() if k.endswith(("/loss", "/grad_norm"))):
            return record["step"]
    raise AssertionError("the run never diverged")


def test_a_diverging_run_stops_at_its_first_bad_step_and_keeps_its_last_finite_checkpoint(tmp_path, packed_dir,
                                                                                          monkeypatch, capsys,
                                                                                          one_thread):
    # Logged and saved every step, one periodic checkpoint kept: pruning would have removed every finite one.
    code, errors, _ = command(monkeypatch, capsys, "pretrain",
                              write_run(tmp_path, packed_dir, "every", DIVERGING_LR, keep_checkpoints=1))
    run = tmp_path / "every"
    bad = first_bad_step(run)
    assert code == 1 and len(errors) == 1 and f"pretraining diverged at step {bad} in {run}" in errors[0], errors
    kept = run / "checkpoints" / checkpoint.checkpoint_name(bad - 1)
    assert f"the last checkpoint, {kept}, was saved before it and is kept" in errors[0]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [kept.name]  # nothing written after it
    assert checkpoint.latest(run) == kept and not (run / "summary.json").exists()
    checkpoint.verify(kept)
    assert all(torch.isfinite(w).all() for w in load_file(str(kept / checkpoint.WEIGHTS)).values())
    # Logged only at the end: the first bad step is found, and named, at the next checkpoint (the phase switch
    # after step 3), which is then not written.
    code, errors, _ = command(monkeypatch, capsys, "pretrain", write_run(tmp_path, packed_dir, "late", DIVERGING_LR,
                                                                         log_every=6, save_every=0))
    assert code == 1 and len(errors) == 1 and f"pretraining diverged at step {bad} in " in errors[0], errors
    assert "no checkpoint was saved" in errors[0]
    assert not list((tmp_path / "late" / "checkpoints").glob("step-*")) and not (tmp_path / "late" / "LATEST").exists()


CPU_OUT_OF_MEMORY = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                     "tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory)")


def out_of_memory_at(step: int, real=Trainer.train_step):
    def train_step(self, objective):
        if self.step + 1 == step:
            raise RuntimeError(CPU_OUT_OF_MEMORY)
        return real(self, objective)
    return train_step


def test_out_of_memory_is_one_line_and_a_start_that_saved_nothing_does_not_block_its_name(tmp_path, packed_dir,
                                                                                         monkeypatch, capsys,
                                                                                         one_thread):
    run, file = tmp_path / "big", write_run(tmp_path, packed_dir, "big", 1e-3, micro_batch=4, keep_checkpoints=2)
    monkeypatch.setattr(Trainer, "train_step", out_of_memory_at(1))
    code, errors, _ = command(monkeypatch, capsys, "pretrain", file)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: pretraining ran out of memory at step 1 in {run} (it asked for 2.00 GiB): "
                                "a micro-batch of 4 sequences x ")
    assert "tokens did not fit; set train.micro_batch=2 (this rank's batch of 4 stays, as gradient" in errors[0]
    assert errors[0].endswith("it saved no checkpoint, so the next start begins it again")
    assert (run / "config.yaml").exists() and not (run / "checkpoints").exists()
    # Its folder held a start with nothing to resume from: a new start (no --resume) takes the name again...
    monkeypatch.setattr(Trainer, "train_step", out_of_memory_at(3))
    code, errors, _ = command(monkeypatch, capsys, "pretrain", file)
    assert f"{run} held a start that saved no checkpoint (config.yaml, metrics.jsonl removed)" in command.log
    assert code == 1 and len(errors) == 1 and "at step 3 in" in errors[0], errors
    assert "its last checkpoint, step-0000002, is kept: pass --resume with the new setting" in errors[0]
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    # ...but a run with a checkpoint is never replaced: refused, then resumed with the smaller micro-batch.
    monkeypatch.undo()
    code, errors, _ = command(monkeypatch, capsys, "pretrain", file)
    assert code == 2 and "already holds a run (last checkpoint step-0000002)" in errors[0], errors
    code, errors, _ = command(monkeypatch, capsys, "pretrain", file, "--resume", "--set", "train.micro_batch=2")
    assert code == 0 and not errors and checkpoint.latest(run).name == checkpoint.checkpoint_name(STEPS)
    # CUDA's message reads the same way; what is no memory error stays a bug (its traceback).
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity")
    assert is_out_of_memory(cuda) and not is_out_of_memory(RuntimeError("shape mismatch"))
    assert "(it asked for 20.00 MiB)" in str(out_of_memory(cuda, run, 7, 8, 64, 512, False))
    # The advice is a setting that is accepted: a divisor of the rank's batch at most half the micro-batch, and
    # activation checkpointing unless it is on; none when nothing is left to lower.
    assert "set train.micro_batch=5 (this rank's batch of 15 stays" in str(out_of_memory(cuda, run, 1, 15, 15, 8, 1))
    assert "set train.micro_batch=1 (this rank's batch of 3001" in str(out_of_memory(cuda, run, 1, 3001, 3001, 8, 0))
    last = str(out_of_memory(cuda, run, 1, 1, 1, 8, True))
    assert "a micro-batch of 1 sequence x 8 tokens did not fit; nothing of this run fits" in last


def trainer(tmp_path, packed_dir, resume=False, **train):
    cfg = {**config(tmp_path, packed_dir, "spiky", **train), "optim": {"lr": 30.0}}
    return Trainer(validate(PretrainConfig, cfg, "test"), resume=resume, show_progress=False, log=lambda m: None)


def test_a_loss_spike_stops_the_run_only_when_asked_and_a_resumed_run_where_it_first_did(tmp_path, packed_dir,
                                                                                        one_thread):
    summary = trainer(tmp_path / "off", packed_dir).run()  # LR 30: finite losses a thousand times the first
    assert summary["final"]["mlm40/loss"] > 1000 * 6
    with pytest.raises(Diverged, match=r"diverged at step 2 .*the clm/loss logged, .* is over "
                                       r"train\.loss_spike=3 x the lowest before \(5\.79\)"):
        trainer(tmp_path / "on", packed_dir, loss_spike=3).run()
    run = tmp_path / "on" / "spiky"
    assert [p.name for p in (run / "checkpoints").glob("step-*")] == ["step-0000001"]
    # Resumed from step 1, the lowest loss before is read back from the log: the same stop.
    with pytest.raises(Diverged, match="diverged at step 2 "):
        trainer(tmp_path / "on", packed_dir, resume=True, loss_spike=3).run()


# ------------------------------------------------------------------------------------------------ studies


def write_study(tmp_path, packed_dir, task, lr, budget=4, **spec) -> None:
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": str(packed_dir)}, "model": TINY, "lr_schedule": {"kind": "wsd", "warmup_steps": 1,
                                                                          "decay_steps": 2},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 1, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0],
        "max_length": 32, "dtype": "fp32"}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": budget,
        "pretrain_overrides": {"optim": {"lr": lr}}, "models": [{"sizes": ["tiny"], "objectives": ["clm", "mlm40"]}],
        "evaluation": {"protocol": "protocol.yaml", "tasks": [str(task)]}, **spec}))


def test_a_failed_job_fails_the_study_with_or_without_job(tmp_path, packed_dir, classification_task, monkeypatch,
                                                          capsys, one_thread):
    task = classification_task(tmp_path / "task")
    write_study(tmp_path, packed_dir, task, DIVERGING_LR)
    study, status = tmp_path / "study.yaml", tmp_path / "studies" / "s" / "status"
    code, errors, _ = command(monkeypatch, capsys, "study", "run", study, "--job", "pretrain:tiny-clm-5")
    assert code == 2 and errors[0].startswith("error: no job 'pretrain:tiny-clm-5' in study s; its 4 jobs are "
                                              "pretrain:tiny-clm-4, ")
    assert not (tmp_path / "studies" / "s").exists()  # nothing written before the refusal
    code, errors, _ = command(monkeypatch, capsys, "study", "run", study, "--job", "pretrain:tiny-clm-4")
    log = status / "pretrain__tiny-clm-4.json"
    assert code == 1 and errors == [f"error: study s: 1 of 1 jobs failed: pretrain:tiny-clm-4 (log: {log}); "
                                    "`encoderlab study run` runs them again once the cause is fixed"]
    assert "Diverged: pretraining diverged at step" in json.loads(log.read_text())["reason"]
    code, errors, out = command(monkeypatch, capsys, "study", "run", study, "--json")
    result = json.loads(out)
    assert code == 1 and len(errors) == 1 and "2 of 4 jobs failed: pretrain:tiny-clm-4 (log: " in errors[0]
    assert "pretrain:tiny-mlm40-4 (log: " in errors[0] and "2 jobs that depend on them skipped" in errors[0]
    skipped = [f"eval:tiny-clm-4:{task}", f"eval:tiny-mlm40-4:{task}"]
    assert result["skipped"] == skipped and result["done"] == 0
    for job in skipped:  # each marked by name, with the job it waited for
        marker = json.loads((status / f"{job.replace(':', '__').replace('/', '_')}.json").read_text())
        assert marker == {"job": job, "status": "skipped", "reason": f"pretrain:{job.split(':')[1]} failed"}


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_an_edited_study_file_is_refused_naming_what_changed(tmp_path, packed_dir, classification_task, monkeypatch,
                                                             capsys, one_thread):
    task = classification_task(tmp_path / "task")
    write_study(tmp_path, packed_dir, task, 3e-3)
    study = tmp_path / "study.yaml"
    assert command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain")[0] == 0
    before = snapshot(tmp_path / "studies")
    write_study(tmp_path, packed_dir, task, 1e-3)
    for job in ([], ["--job", "pretrain:tiny-clm-4"], ["--dry-run"]):  # a dry run says what the run would say
        code, errors, _ = command(monkeypatch, capsys, "study", "run", study, *job)
        assert code == 2 and errors == [
            f"error: study s: the study file now gives other settings than those its runs in {tmp_path / 'studies/s'} "
            "were started with: optim.lr: 0.003 -> 0.001 in pretrain:tiny-clm-4, pretrain:tiny-mlm40-4; nothing was "
            "run: restore those settings, or give the study another name to run it in a new folder"], errors
        assert snapshot(tmp_path / "studies") == before  # nothing written, nothing run
    write_study(tmp_path, packed_dir, task, 3e-3)  # restored: what was done stays done
    code, _, out = command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain", "--json")
    assert code == 0 and json.loads(out)["done_now"] == 0


def test_a_new_budget_keeps_the_random_init_baseline_whose_weights_it_does_not_change(
        tmp_path, packed_dir, classification_task, monkeypatch, capsys, one_thread):
    """The baseline's weights are the seed's initialisation of its model: another budget (its config's train.steps),
    LR or objective makes the same weights, so they are no change to refuse; another model shape is one."""
    task = classification_task(tmp_path / "task")
    write_study(tmp_path, packed_dir, task, 3e-3, random_init=["tiny"])
    study, baseline = tmp_path / "study.yaml", tmp_path / "studies" / "s" / "random-init" / "tiny"
    assert command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain")[0] == 0
    before = snapshot(baseline)
    write_study(tmp_path, packed_dir, task, 1e-3, budget=6, random_init=["tiny"])  # new runs: tiny-clm-6, ...
    code, errors, out = command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain", "--json")
    assert code == 0, errors
    assert json.loads(out)["done_now"] == 2 and snapshot(baseline) == before  # the two new runs, not the baseline
    write_study(tmp_path, packed_dir, task, 1e-3, budget=6, random_init=["tiny"],
                size_overrides={"tiny": {"model": {"intermediate_size": 96}}})
    code, errors, _ = command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain")
    assert code == 2 and "model.intermediate_size: 64 -> 96 in " in errors[0] and "random:tiny" in errors[0], errors


def test_one_process_runs_a_study_at_a_time_and_jobs_share_it(tmp_path, packed_dir, classification_task,
                                                                monkeypatch, capsys, one_thread):
    """Two `study run`s at once: the second took the first one's running jobs for failed ones. Now it is refused in
    one line naming the holder; `--job`s (one per cluster job) run side by side, but not beside a whole run."""
    from encoderlab.core.process import run_lock

    write_study(tmp_path, packed_dir, classification_task(tmp_path / "task"), 3e-3)
    study, root, holder = tmp_path / "study.yaml", tmp_path / "studies" / "s", shlex.join(sys.argv)
    with run_lock(root, "a study"):  # another whole `study run` (the lock conflicts within one process too)
        for job in ([], ["--job", "pretrain:tiny-clm-4"]):
            code, errors, _ = command(monkeypatch, capsys, "study", "run", study, *job)
            assert code == 2 and errors == [f"error: cannot write study s into {root}: process {os.getpid()} on "
                                            f"{socket.gethostname()} ({holder}) is writing there; wait "
                                            "for it to end or stop it (one process at a time writes a folder)"]
            assert sorted(p.name for p in root.iterdir()) == [".lock"]  # nothing written
    holder = shlex.join(sys.argv)  # as `command` left it
    with run_lock(root, "a study", shared=True):  # a `--job` running: another job runs, a whole run is refused
        assert command(monkeypatch, capsys, "study", "run", study, "--job", "pretrain:tiny-clm-4")[0] == 0
        code, errors, _ = command(monkeypatch, capsys, "study", "run", study)
        assert code == 2 and errors[0].startswith(f"error: cannot write study s into {root}: process {os.getpid()} "
                                                  f"on {socket.gethostname()} ({holder}) is writing there"), errors
    assert not list(root.glob(".lock.*"))  # a shared holder's name goes with it
    code, _, out = command(monkeypatch, capsys, "study", "run", study, "--only", "pretrain", "--json")
    assert code == 0 and json.loads(out)["done_now"] == 1  # the job run beside the held lock is done


# ------------------------------------------------------------------------------------------------ sweeps


def test_a_sweep_whose_run_raises_does_not_finish(tmp_path, packed_dir, classification_task, monkeypatch, capsys,
                                                  one_thread):
    from encoderlab.finetuning import sweep

    Trainer(validate(PretrainConfig, config(tmp_path, packed_dir, "run"), "test"), show_progress=False,
            log=lambda m: None).run()
    task = classification_task(tmp_path / "task")

    def raising(*args, **kwargs):
        raise RuntimeError("a bug in one run")

    monkeypatch.setattr(sweep, "finetune", raising)
    with pytest.raises(RuntimeError, match="a bug in one run"):  # a traceback and exit code 1, never "done"
        command(monkeypatch, capsys, "sweep", tmp_path / "run", task, "--out", tmp_path / "evals", "--set",
                "max_steps=1", "--set", "lrs=[0.001]", "--set", "seeds=[0]", "--engine", "sequential",
                "--workers", "1")
    assert not list((tmp_path / "evals").rglob("*lr*.json"))  # no record of the run that raised
