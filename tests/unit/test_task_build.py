"""Tasks built whole (tasks/build.py): made with their identity by their family's loader, then sealed, so that no
order-dependent step is taken again on a built task; tasks made by hand keep every step."""
from __future__ import annotations

import dataclasses

import pytest

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning.protocol import Protocol
from encoderlab.tasks import load_task, registry, task_identity
from encoderlab.tasks.build import build_task
from encoderlab.tasks.retrieval import RetrievalTask

PROTOCOL = Protocol(name="t", max_steps=1, batch_size=4, lrs=[1e-3], seeds=[0], max_length=16, dtype="fp32")


def tokenizer():
    return train_bpe(["the film was good", "the film was bad"], 300)


def test_a_task_is_made_with_its_identity(tmp_path, classification_task):
    spec = str(classification_task(tmp_path))
    task = load_task(spec)
    assert task.fingerprint and (task.name, task.fingerprint) == task_identity(spec)


def test_a_loader_that_drops_the_fingerprint_is_refused(tmp_path, classification_task, monkeypatch):
    spec = str(classification_task(tmp_path))
    record = registry.family("classification")
    careless = dataclasses.replace(record, load_user=lambda file, holdout, fingerprint: record.load_user(
        file, holdout, fingerprint=""))
    monkeypatch.setattr(registry, "family", lambda name: careless)
    with pytest.raises(DataError, match="made task 'task' with fingerprint ''"):
        load_task(spec)


def test_a_built_task_refuses_the_steps_that_built_it(tmp_path, classification_task):
    tok = tokenizer()
    task = build_task(str(classification_task(tmp_path)), PROTOCOL, tok)
    assert task.baseline_scores
    steps = {"subsample": lambda: task.subsample("train", 2, seed=0), "apply_protocol": lambda: task.apply_protocol(
        PROTOCOL), "limit": lambda: task.limit(PROTOCOL, seed=0), "prepare": lambda: task.prepare(tok, 16)}
    for name, step in steps.items():
        with pytest.raises(RuntimeError, match=f"task 'task' is built .*: {name} would change it"):
            step()


def test_a_task_made_by_hand_takes_every_step_again(tmp_path, classification_task):
    tok = tokenizer()
    task = load_task(str(classification_task(tmp_path)))
    for _ in range(2):
        task.subsample("train", 6, seed=0)
        task.apply_protocol(PROTOCOL)
        task.limit(PROTOCOL, seed=0)
        task.prepare(tok, 16)
    assert task.num_train_examples() == 6


def test_a_sealed_retrieval_task_refuses_its_own_subsample_limit_and_prepare():
    corpus = {f"d{i}": {"title": "", "text": f"document {i}"} for i in range(4)}
    queries = {f"q{i}": f"query {i}" for i in range(4)}
    qrels = {s: {f"q{i}": {f"d{i}": 1} for i in range(4)} for s in ("validation", "test")}
    qrels["train"] = {f"q{i}": {f"d{(i + 1) % 4}": 1} for i in range(4)}  # no test answer trained on
    task = RetrievalTask("r", corpus, queries, qrels)
    task.seal()
    for name, step in {"subsample": lambda: task.subsample("test", 2, seed=0),
                       "limit": lambda: task.limit(PROTOCOL, seed=0),
                       "prepare": lambda: task.prepare(tokenizer(), 16)}.items():
        with pytest.raises(RuntimeError, match=f"{name} would change it"):
            step()
