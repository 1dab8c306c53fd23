"""Tagging QA end to end: an offline task folder, a tiny pretrained checkpoint, `run_sweep` under a protocol with
the authors' QA choices (qa.format tagging, inputs eos, dropout, random batch order): records with both metrics, and
a tagging task that learns its answers."""
from __future__ import annotations

import random

import torch

from conftest import train_tiny
from encoderlab.data.offline.taskfiles import write_task_folder
from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.qa import QATask

NAMES = ["Paris", "Berlin", "Oslo", "Nile", "Kenya", "Rhine"]
FILLER = "the river ran past old towns where people traded grain and cloth while boats carried news".split()


def rows(n: int, split: str, seed: int, names_per_context: int = 1, unanswerable: bool = False) -> list[dict]:
    """Short contexts of filler words with names in them; the answer is one of the names (`unanswerable`: none in
    every 5th question)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(5, 12))]
        names = rng.sample(NAMES, names_per_context)
        for name in names:
            words.insert(rng.randrange(len(words) + 1), name)
        context, answer = " ".join(words) + ".", names[0]
        texts, starts = ([], []) if unanswerable and i % 5 == 4 else ([answer], [context.index(answer)])
        out.append({"id": f"{split}{i}", "context": context, "question": f"Where is {answer}?",
                    "answers": {"text": texts, "answer_start": starts}, "title": ""})
    return out


def test_a_tagging_sweep_records_both_metrics(tmp_path, packed_dir, monkeypatch, one_thread):
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))  # offline tasks are answerable by construction
    write_task_folder(tmp_path / "home" / "data" / "offline" / "tasks",
                      {"name": "toy-cloze", "family": "qa", "description": "tagging test"}, {},
                      {s: rows(n, s, k) for k, (s, n) in enumerate((("train", 24), ("validation", 10), ("test", 10)))})
    train_tiny(tmp_path, packed_dir)
    protocol = Protocol(name="t", max_steps=4, batch_size=8, eval_batch_size=8, lrs=[1e-3], seeds=[0, 1],
                        max_length=48, dtype="fp32", curve_every=2, qa={"format": "tagging"}, inputs="eos",
                        batch_order="random", tokens={"dropout": 0.1})
    lines: list[str] = []
    summary = run_sweep(tmp_path / "tiny", ["toy-cloze"], protocol, tmp_path / "evals", log=lines.append,
                        show_progress=False)
    assert summary["tasks"]["toy-cloze"]["runs"] == 2 and summary["tasks"]["toy-cloze"]["failed"] == 0
    assert any("toy-cloze (qa, token_f1)" in line and "24 training questions" in line for line in lines)
    found = [r for r in records.load_all(tmp_path / "evals") if r["task"] == "toy-cloze"]
    assert len(found) == 2
    for record in found:
        assert record["metric"] == "token_f1" and record["status"] == "ok" and record["steps"] == 3
        for split in ("validation", "test"):
            scores = record["scores"][split]
            assert set(scores) == {"score", "token_f1", "standard", "f1", "exact_match"}
            assert scores["score"] == scores["token_f1"] and scores["standard"] == scores["f1"]
            assert all(0 <= v <= 100 for v in scores.values())
        assert set(record["baseline"]["test"]) == {"score", "token_f1", "standard", "f1", "exact_match"}
    assert found[0]["protocol"]["qa"] == {"format": "tagging"} and found[0]["protocol"]["inputs"] == "eos"


def test_tagging_learns_to_tag_the_answer():
    # Three names per context, the question names the answer: which one it is has to be learnt.
    data = rows(10, "t", 5, names_per_context=3, unanswerable=True)
    texts = [r["context"] + " Question: " + r["question"] + " Context:" for r in rows(64, "x", 9, 3)]
    tok = train_bpe(texts + [" ".join(FILLER)] * 4, 400)
    task = QATask("fit", {"train": data, "validation": data, "test": data}, allow_unanswerable=True)
    task.apply_protocol(Protocol(qa={"format": "tagging"}, inputs="eos"))
    task.prepare(tok, 64)
    assert task.trivial_baseline("test")["score"] < 50
    torch.manual_seed(0)
    backbone = Transformer(ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1))
    head = task.make_head(32, torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW([*backbone.parameters(), *head.parameters()], lr=3e-3, weight_decay=0.0)
    history = [task.evaluate(backbone, head, "test", 10)["score"]]
    for step in range(150):
        for batch in task.train_batches(10, seed=step):
            task.loss(backbone, head, batch).backward()
            optimizer.step()
            optimizer.zero_grad()
        if step % 10 == 9:
            history.append(task.evaluate(backbone, head, "test", 10)["score"])
            if history[-1] == 100.0:
                break
    assert history[0] < 50 and history[-1] == 100.0, history
    scores = task.evaluate(backbone, head, "test", 10)
    assert scores["standard"] == scores["exact_match"] == 100.0  # all 1s right: the answer's text, exactly
