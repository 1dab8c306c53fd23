"""The authors' token classification end to end: a task file prepared by the sweep under `tokens: {all_subwords,
dropout 0.1, sentence_macro_f1}`, `inputs: eos`, `batch_order: random`, trained by both engines to the same records
(tests/unit/test_batched.py explains the tolerance), the dropout really applied."""
from __future__ import annotations

import random

import pytest
import torch
from test_tokens_authors import hand_tokenizer

from encoderlab.finetuning import batched
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.task_prep import prepare_tasks
from encoderlab.finetuning.training import finetune
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest

LOSS_RTOL = 1e-5
CPU = torch.device("cpu")
TAGS = {"Oslo": "B-LOC", "Reykjavik": "B-LOC", "Zoe": "B-PER", "Kimberly": "B-PER"}
PLAIN = ["the", "cat", "sat", "ran", "in", "."]


def conll(path, rng: random.Random, n: int) -> None:
    lines = []
    for _ in range(n):
        words = [rng.choice(PLAIN) for _ in range(rng.randint(1, 6))]
        for _ in range(rng.randint(0, 2)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(list(TAGS)))
        lines += [f"{w} {TAGS.get(w, 'O')}" for w in words] + [""]
    path.write_text("\n".join(lines) + "\n")


def protocol(**over) -> Protocol:
    return Protocol(**{"name": "authors-tc", "max_steps": 8, "epochs": 2, "batch_size": 4, "eval_batch_size": 8,
                       "lrs": [1e-3, 3e-3], "seeds": [0, 1], "max_length": 48, "dtype": "fp32",
                       "warmup_fraction": 0.25, "curve_every": 2, "inputs": "eos", "batch_order": "random",
                       "tokens": {"labels": "all_subwords", "dropout": 0.1, "metric": "sentence_macro_f1"}, **over})


@pytest.fixture
def prepared(tmp_path):
    rng = random.Random(0)
    for split, n in (("train", 21), ("dev", 10), ("test", 10)):
        conll(tmp_path / f"{split}.txt", rng, n)
    (tmp_path / "task.yaml").write_text("family: tokens\nname: toy-authors\ntrain: train.txt\nvalidation: dev.txt\n"
                                        "test: test.txt\ntag_scheme: iob2\n")
    tok = hand_tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    backbone = Transformer(cfg)
    backbone.init_weights(0)

    def task_under(p: Protocol, log=lambda m: None):
        (task,) = prepare_tasks([str(tmp_path / "task.yaml")], tok, p, cache_dir=tmp_path / "cache", log=log)
        return task

    return task_under, cfg, backbone.state_dict()


def test_the_sweep_prepares_the_authors_task_and_both_engines_give_the_same_records(prepared):
    task_under, cfg, weights = prepared
    seen: list[str] = []
    p = protocol()
    task = task_under(p, seen.append)
    assert "(tokens, sentence_macro_f1 over iob2 tags)" in seen[0]
    assert (task.label_mode, task.dropout, task.inputs, task.batch_order) == ("all_subwords", 0.1, "eos", "random")
    assert all(ids[0] != 0 and ids[-1] == 1 for ids in task.ids["train"])  # no <bos>, <eos> last
    runs = [(lr, seed) for lr in p.lrs for seed in p.seeds]
    grid = list(batched.finetune_grid(task, cfg, weights, runs, protocol=p, device=CPU))
    for body in grid:
        sequential = finetune(task, cfg, weights, lr=body["lr"], seed=body["seed"], protocol=p, device=CPU)
        assert body["status"] == sequential["status"] == "ok" and body["steps"] == sequential["steps"] == 8
        assert [s for s, _ in body["curve"]] == [s for s, _ in sequential["curve"]] == [2, 4, 6, 8]
        for (_, a), (_, b) in zip(body["curve"], sequential["curve"]):
            assert abs(a - b) <= LOSS_RTOL * abs(b), (body["curve"], sequential["curve"])
        assert body["scores"] == sequential["scores"]
        for scores in body["scores"].values():
            assert scores["score"] == scores["sentence_macro_f1"] and scores["standard"] == scores["f1"]
            assert set(scores) == {"score", "standard", "f1", "precision", "recall", "accuracy", "sentence_macro_f1"}


def test_the_dropout_is_applied_in_training(prepared):
    task_under, cfg, weights = prepared
    first = []
    for dropout in (0.1, 0.0):
        p = protocol(tokens={"labels": "all_subwords", "dropout": dropout, "metric": "sentence_macro_f1"})
        first.append(finetune(task_under(p), cfg, weights, lr=3e-3, seed=0, protocol=p, device=CPU)["curve"][0][1])
    assert abs(first[0] - first[1]) > 1e-4 * abs(first[1]), first  # the same weights and data, other losses
