"""A sweep says what a run needs before it starts and refuses one that cannot fit; while runs train it prints a
line at least every 30 seconds."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from test_sweep import task_yaml, tiny_checkpoint  # noqa: F401 - fixtures

from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import records
from encoderlab.finetuning.heartbeat import Heartbeat
from encoderlab.finetuning.memory import LIMIT_ENV, estimate
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.model.presets import preset
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.study.jobs import EvalJob, PretrainJob

PROTOCOL = {"name": "t", "max_steps": 3, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0],
            "max_length": 32, "dtype": "fp32"}


def test_a_run_that_cannot_fit_is_refused_before_it_starts(tmp_path, tiny_checkpoint, task_yaml, monkeypatch,  # noqa: F811
                                                          one_thread):
    monkeypatch.setenv(LIMIT_ENV, "0.0001")  # 100 KB: no model fits
    with pytest.raises(EncoderlabError, match=r"task: a fine-tuning run needs about [0-9.]+ GB \(.* activations at "
                       r"8 sequences x 32 tokens, [0-9.]+ GB the process itself\), more than the 0.1 MB "
                       rf"{LIMIT_ENV}=0.0001; nothing was run: lower .* task_overrides: \{{.*: \{{max_length: 16, "
                       r"batch_size: 2\}\}$"):
        run_sweep(tiny_checkpoint, [str(task_yaml)], Protocol(**PROTOCOL), tmp_path / "evals", log=lambda m: None,
                  show_progress=False)
    assert records.load_all(tmp_path / "evals") == []  # nothing trained, nothing written
    monkeypatch.setenv(LIMIT_ENV, "64")
    lines: list[str] = []
    run_sweep(tiny_checkpoint, [str(task_yaml)], Protocol(**PROTOCOL), tmp_path / "evals", log=lines.append,
              show_progress=False)
    assert any("memory estimate" in line and f"; 64.0 GB {LIMIT_ENV}=64" in line for line in lines), lines
    assert any(": first step " in line and "the 1 runs to do" in line for line in lines), lines


def test_the_estimate_grows_with_batch_and_length_and_counts_adamw():
    cfg = preset("micro", vocab_size=320)
    task = SimpleNamespace(family="classification")
    base = estimate(cfg, task, Protocol(**PROTOCOL))
    params = cfg.num_parameters(include_embeddings=False) + cfg.vocab_size * cfg.hidden_size
    assert base.weights == params * (4 * 4 + 4)  # fp32 weights, gradients, two AdamW moments, the sweep's copy
    double = estimate(cfg, task, Protocol(**{**PROTOCOL, "batch_size": 16}))
    assert double.activations == 2 * base.activations and double.weights == base.weights
    longer = estimate(cfg, task, Protocol(**{**PROTOCOL, "max_length": 64}))
    assert longer.activations > 2 * base.activations  # the attention probabilities grow with the length squared
    pairs = estimate(cfg, SimpleNamespace(family="retrieval"), Protocol(**PROTOCOL))
    assert pairs.sequences == 16 and pairs.activations == 2 * base.activations


def test_the_process_own_footprint_is_measured_and_not_asked_of_the_machine_twice(monkeypatch):
    from encoderlab.finetuning import memory
    monkeypatch.setattr(memory, "resident_bytes", lambda: 700 * 2**20)  # a process that holds 700 MB now
    est = estimate(preset("micro", vocab_size=320), SimpleNamespace(family="classification"), Protocol(**PROTOCOL))
    assert est.runtime == 700 * 2**20 + memory.WORKING_BYTES and est.resident == 700 * 2**20
    run = est.weights + est.activations + memory.WORKING_BYTES
    assert est.to_ask(1) == run  # a run in this process: what it holds is already resident
    assert est.to_ask(3) == 3 * est.total  # each worker process is new and holds as much again
    gpu = estimate(preset("micro", vocab_size=320), SimpleNamespace(family="classification"), Protocol(**PROTOCOL),
                   torch.device("meta"))
    assert gpu.runtime == gpu.resident == 0


def test_the_heartbeat_speaks_at_least_every_30_seconds():
    now = [0.0]
    lines: list[str] = []
    beat = Heartbeat(lines.append, runs=4, clock=lambda: now[0])
    beat.start("imdb lr=1e-05 seed=0")
    for step in range(1, 201):
        now[0] += 2.0  # 2 s a step: 400 s of training
        beat.step(step, 200)
    assert lines[0] == ("imdb lr=1e-05 seed=0: first step 2.00 s; a run of 200 steps ~6.7 min of training, the 4 "
                        "runs to do ~26.7 min (scoring not included)")
    assert len(lines) == 1 + 13  # then one line each 30 s (15 steps) up to 400 s, none in between
    assert lines[1] == ("imdb lr=1e-05 seed=0 (run 1 of 4): step 16/200, 2.00 s/step, this run's training ends in "
                        "~6.1 min")


def test_the_heartbeat_of_runs_in_worker_processes_says_runs_done_running_and_left():
    now = [0.0]
    lines: list[str] = []
    beat = Heartbeat(lines.append, runs=6, clock=lambda: now[0])
    for done in (0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1):  # the parent looks up every 5 s
        now[0] += 5.0
        beat.waiting(done, 2)
    assert lines == ["0 of 6 runs done, 2 running, 4 waiting; 0.5 min so far, no run finished yet to time the rest by",
                     "1 of 6 runs done, 2 running, 3 waiting; 1.0 min so far, ~5.0 min left at the finished runs' pace"]


def test_a_sweep_on_worker_processes_is_never_silent(tmp_path, tiny_checkpoint, task_yaml, monkeypatch):  # noqa: F811
    from functools import partial

    from encoderlab.finetuning import parallel, sweep

    monkeypatch.setattr(sweep, "Heartbeat", partial(Heartbeat, every=0))  # a line each time the parent looks up
    monkeypatch.setattr(parallel, "POLL_S", 0.05)  # and it looks up far more often than a run ends
    lines: list[str] = []
    run_sweep(tiny_checkpoint, [str(task_yaml)], Protocol(**{**PROTOCOL, "lrs": [1e-3, 2e-3, 3e-3]}),
              tmp_path / "evals", log=lines.append, show_progress=False, workers=2, engine="sequential")
    beats = [re.match(r"(\d) of 3 runs done, (\d) running, (\d) waiting; [0-9.]+ min so far, (.*)$", line)
             for line in lines if " runs done, " in line]
    assert all(beats) and len(beats) >= 2, "\n".join(lines)  # one a run still trains, at least (the third's)
    counts = [tuple(int(b[i]) for i in (1, 2, 3)) for b in beats]
    assert counts == sorted(counts, key=lambda c: c[0]) and counts[-1] == (3, 0, 0)
    assert all(d + r + w == 3 and r == min(2, 3 - d) for d, r, w in counts)
    assert all(re.fullmatch("no run finished yet to time the rest by" if b[1] == "0" else
                            r"~[0-9.]+ min left at the finished runs' pace", b[4]) for b in beats)
    assert len(records.load_all(tmp_path / "evals")) == 3


def test_a_studys_eval_job_says_its_sweeps_heartbeat(tmp_path, tiny_checkpoint, task_yaml):  # noqa: F811
    from encoderlab.study import runner

    job = EvalJob(id="eval:final-x:task", checkpoint=tiny_checkpoint, tasks=[str(task_yaml)],
                  protocol=Protocol(**PROTOCOL), out=tmp_path / "evals")
    lines: list[str] = []
    runner.execute(job, log=lines.append, progress=lines.append)
    assert any(line.startswith("eval:final-x:task: ") and ": first step " in line for line in lines), lines
    # a worker's lines reach the study's log through run_jobs: test_study_job_states.py


def test_a_studys_pretraining_job_says_its_step_every_30_seconds(tmp_path, packed_dir):
    """A study's pretraining job was silent to its end (10 minutes in the demo). Now it says its step, loss and ETA
    at its first log line, then at most once every 30 s, and at its last step."""
    from encoderlab.study import runner

    config = {"name": "x", "out_dir": str(tmp_path), "data": {"path": str(packed_dir)},
              "model": {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                        "num_attention_heads": 2, "num_key_value_heads": 1},
              "objective": "mlm40", "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
              "train": {"steps": 4, "global_batch": 2, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                        "tensorboard": False}}
    lines: list[str] = []
    runner.execute(PretrainJob(id="pretrain:x", config=PretrainConfig.model_validate(config)), progress=lines.append)
    assert [line.split("  ")[0] for line in lines] == ["pretrain:x: step 1/4", "pretrain:x: step 4/4"], lines
    assert "loss " in lines[0] and lines[0].endswith(" min")
