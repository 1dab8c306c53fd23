"""A sweep says what a run needs before it starts and refuses one that cannot fit; while runs train it prints a
line at least every 30 seconds."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_sweep import task_yaml, tiny_checkpoint  # noqa: F401 - fixtures

from encoderlab.errors import EncoderlabError
from encoderlab.evaluation import records
from encoderlab.evaluation.feedback import LIMIT_ENV, Heartbeat, estimate
from encoderlab.evaluation.protocol import Protocol
from encoderlab.evaluation.sweep import run_sweep
from encoderlab.model.presets import preset

PROTOCOL = {"name": "t", "max_steps": 3, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0],
            "max_length": 32, "dtype": "fp32"}


def test_a_run_that_cannot_fit_is_refused_before_it_starts(tmp_path, tiny_checkpoint, task_yaml, monkeypatch,  # noqa: F811
                                                          one_thread):
    monkeypatch.setenv(LIMIT_ENV, "0.0001")  # 100 KB: no model fits
    with pytest.raises(EncoderlabError, match=r"task: a fine-tuning run needs about [0-9.]+ MB \(.* activations at "
                       r"8 sequences x 32 tokens\), more than the 0.1 MB "
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
