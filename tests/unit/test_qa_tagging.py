"""QA as token tagging (`qa.format: tagging`, the paper authors' QA): inputs and labels written down by hand on a
word-level tokenizer, the position-set F1 and SQuAD F1 of hand-made predictions, the metric against its definition
on random sets, the head and loss, the spans mode's shared hooks, and the batched engine."""
from __future__ import annotations

import random

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from encoderlab.data.tokenizer import TextTokenizer, train_bpe
from encoderlab.finetuning import batched, engines
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import finetune
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.metrics import token_position_f1
from encoderlab.tasks.qa import QATask
from encoderlab.tasks.qa_tagging import TaggingHead

CPU = torch.device("cpu")
WORDS = ["<bos>", "<eos>", "<pad>", "<mask>", "<unk>", "Question", ":", "Context", "?",
         "Where", "Who", "Why", "What", "Which", "Ada", "met", "Bob", "in", "Oslo", "and", "Rome"]


@pytest.fixture(scope="module")
def words():
    """One token per word or punctuation mark: ids are WORDS' indices, so inputs can be written by hand."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return TextTokenizer(tok, bos_id=0, eos_id=1, pad_id=2, mask_id=3, origin="test")


def ex(qid: str, question: str, context: str, *answers: str) -> dict:
    return {"id": qid, "question": question, "context": context,
            "answers": {"text": list(answers), "answer_start": [context.index(a) for a in answers]}}


SHORT, LONG = "Ada met Bob in Oslo", "Ada met Bob in Oslo and Rome"
EXAMPLES = [ex("e1", "Where?", SHORT, "Oslo"),
            ex("e2", "Who?", SHORT, "met Bob", "Bob"),  # two gold answers: only the first is tagged
            ex("e3", "Why?", "Ada met Bob"),  # unanswerable
            ex("e4", "What?", LONG, "Rome"),  # cut off by truncation at max_length 12
            ex("e5", "Which?", LONG, "Oslo and Rome")]  # cut in the middle


def tagging_task(examples=EXAMPLES, **protocol) -> QATask:
    task = QATask("toy", {s: [dict(e) for e in examples] for s in ("train", "validation", "test")},
                  allow_unanswerable=True)
    task.apply_protocol(Protocol(qa={"format": "tagging"}, **protocol))
    return task


def ids(*tokens: str) -> list[int]:
    return [WORDS.index(t) for t in tokens]


def test_inputs_and_labels_by_hand(words):
    task = tagging_task(inputs="eos")
    task.prepare(words, max_length=12)
    assert task.metric == "token_f1" and task.standard_metric == "f1" and task.num_train_examples() == 5
    q = ["Question", ":", "{}", "?", "Context", ":"]  # "Question: {q}\nContext: ": 6 tokens, then the context

    def question(word):
        return [word if t == "{}" else t for t in q]

    expected = [  # (input, labels): 12 tokens at most, only the context side (its <eos> first) is cut
        (question("Where") + ["Ada", "met", "Bob", "in", "Oslo", "<eos>"], [0] * 10 + [1, 0]),
        (question("Who") + ["Ada", "met", "Bob", "in", "Oslo", "<eos>"], [0] * 7 + [1, 1] + [0] * 3),
        (question("Why") + ["Ada", "met", "Bob", "<eos>"], [0] * 10),  # unanswerable: all 0
        (question("What") + ["Ada", "met", "Bob", "in", "Oslo", "and"], [0] * 12),  # "Rome" is cut: all 0
        (question("Which") + ["Ada", "met", "Bob", "in", "Oslo", "and"], [0] * 10 + [1, 1]),  # tagged up to the cut
    ]
    got = task.tagging.inputs("train")
    assert [(g["ids"], g["labels"]) for g in got] == [(ids(*i), lab) for i, lab in expected]
    assert [(g["context_pos"], g["context_tokens"]) for g in got] == [(6, 5), (6, 5), (6, 3), (6, 6), (6, 6)]
    assert task.truncated == {"train": 2, "validation": 2, "test": 2} and task.truncation_unit == "examples"

    bos = tagging_task(inputs="bos_eos")  # a <bos> in front: one context token less fits
    bos.prepare(words, max_length=12)
    first = bos.tagging.inputs("train")[0]
    assert first["ids"] == ids("<bos>", *question("Where"), "Ada", "met", "Bob", "in", "Oslo")
    assert first["labels"] == [0] * 11 + [1]
    assert bos.truncated["test"] == 4  # e3 still fits with its <eos>


def fake_logits(wanted: dict[str, set[int]]):
    """Logits that tag exactly `wanted[question word]` in each row, and every padding position too (which must not
    count: only the input's own tokens are predictions)."""
    def logits(backbone, head, batch):
        out = torch.zeros(*batch["input_ids"].shape, 2)
        for r, row in enumerate(batch["input_ids"].tolist()):
            tagged = wanted[WORDS[row[2]]] | {t for t in range(len(row)) if not batch["attention_mask"][r, t]}
            out[r, sorted(tagged), 1] = 1.0
        return out
    return logits


def test_position_f1_and_squad_f1_of_hand_made_predictions(words, monkeypatch):
    task = tagging_task(inputs="eos")
    task.prepare(words, max_length=12)
    predicted = {"Where": {10}, "Who": {8, 9}, "Why": set(), "What": {3}, "Which": {1, 10, 11}}
    monkeypatch.setattr(task.tagging, "logits", fake_logits(predicted))
    backbone = torch.nn.Linear(1, 1)  # the fake logits ignore the modules
    assert task.tagging.predict_positions(backbone, backbone, "test", 8) == [[10], [8, 9], [], [3], [1, 10, 11]]
    # gold {10} {7,8} {}->{0} {}->{0} {10,11}; F1 = 2 shared / (|pred| + |gold|):
    # e1 1; e2 2*1/4 = 0.5; e3 {0} vs {0}: 1; e4 {3} vs {0}: 0; e5 2*2/5 = 0.8  -> mean 3.3 / 5
    scores = task.evaluate(backbone, backbone, "test", 8)
    assert scores["score"] == scores["token_f1"] == pytest.approx(66.0)
    # SQuAD F1 of the text from the first to the last predicted context token, against all gold answers:
    # e1 "Oslo" 100; e2 "Bob in" vs "Bob": P 1/2 R 1 -> 2/3; e3 "" on unanswerable 100; e4 only a question token
    # predicted -> "" vs "Rome" 0; e5 "Oslo and" vs "Oslo and Rome": P 1 R 2/3 -> 0.8
    assert scores["standard"] == scores["f1"] == pytest.approx((100 + 200 / 3 + 100 + 0 + 80) / 5)
    assert scores["exact_match"] == pytest.approx(40.0)
    # Batched one by one (no padding) the predictions are the same.
    assert task.evaluate(backbone, backbone, "test", 1) == scores


def test_trivial_baseline_is_the_first_span_in_both_metrics(words):
    splits = {"train": EXAMPLES + [ex("e6", "Who?", SHORT, "Ada met")], "validation": EXAMPLES, "test": EXAMPLES}
    task = QATask("toy", splits, allow_unanswerable=True)
    task.apply_protocol(Protocol(qa={"format": "tagging"}, inputs="eos"))
    task.prepare(words, max_length=12)
    base = task.trivial_baseline("test")
    # Median first-answer length in train (1, 2, 1, 3, 2 words) is 2: the first span is "Ada met", positions {6, 7}.
    # token_f1: e1 vs {10} 0; e2 vs {7, 8}: 2*1/4 = 0.5; e3 vs {0} 0; e4 vs {0} 0; e5 vs {10, 11} 0 -> 10
    assert base["score"] == base["token_f1"] == pytest.approx(10.0)
    # SQuAD F1 of "Ada met": e2 vs "met Bob" P 1/2 R 1/2 -> 0.5 (the best gold); the others 0 -> 10
    assert base["standard"] == base["f1"] == pytest.approx(10.0)
    spans = QATask("toy", splits, allow_unanswerable=True)
    assert spans.trivial_baseline("test") == {"score": 10.0, "standard": 10.0, "f1": 10.0, "exact_match": 0.0}


def direct_f1(pred: list[int], gold: list[int]) -> float:
    """The definition as the authors' code writes it: sets, empty = {0}, P and R, F1 = 2PR / (P + R) or 0."""
    p, t = set(pred) if pred else {0}, set(gold) if gold else {0}
    precision, recall = len(p & t) / len(p), len(p & t) / len(t)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def test_token_position_f1_equals_its_definition_on_random_sets():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        preds, golds = [], []
        for _ in range(n):
            kind = rng.random()
            gold = [] if kind < 0.25 else sorted(rng.sample(range(12), rng.randint(1, 4)))  # 25% unanswerable
            pred = [] if rng.random() < 0.3 else [rng.randrange(12) for _ in range(rng.randint(1, 5))]  # repeats
            preds.append(pred), golds.append(gold)
        expected = 100 * sum(direct_f1(p, g) for p, g in zip(preds, golds)) / n
        assert token_position_f1(preds, golds) == pytest.approx(expected, abs=1e-9)
    assert token_position_f1([[]], [[]]) == 100.0 and token_position_f1([[0]], [[]]) == 100.0  # {0} = no answer
    assert token_position_f1([[4]], [[]]) == 0.0 and token_position_f1([[]], [[4, 5]]) == 0.0
    with pytest.raises(ValueError, match="2 predictions but 1 labels"):
        token_position_f1([[1], [2]], [[1]])


def test_head_dropout_and_loss_over_labelled_tokens(words):
    head = TaggingHead(8, 0.5, torch.Generator().manual_seed(0))
    x = torch.randn(2, 5, 8)
    assert not torch.equal(head(x), head(x))  # training: dropout draws masks
    head.eval()
    assert torch.equal(head(x), head.proj(x))
    task = tagging_task(inputs="eos")
    task.prepare(words, max_length=12)
    batch = task.tagging.batch("train", [2, 0])  # lengths 10 and 12: two padding labels
    assert batch["labels"][0, 10:].tolist() == [-100, -100] and batch["attention_mask"][0, 10:].sum() == 0
    logits = torch.randn(2, 12, 2)
    task.tagging.logits = lambda b, h, batch: logits
    labelled = [(r, t) for r in range(2) for t in range(12) if batch["labels"][r, t] >= 0]
    by_hand = -sum(torch.log_softmax(logits[r, t], -1)[batch["labels"][r, t]] for r, t in labelled) / len(labelled)
    assert len(labelled) == 22 and task.loss(None, None, batch) == pytest.approx(float(by_hand), rel=1e-6)


def test_spans_mode_takes_inputs_and_batch_order(words):
    spans = QATask("toy", {s: EXAMPLES for s in ("train", "validation", "test")}, allow_unanswerable=True)
    spans.apply_protocol(Protocol(inputs="eos", batch_order="random"))
    assert spans.tagging is None and spans.metric == "f1"
    spans.prepare(words, max_length=32)
    first = spans.windows("train")[0]
    assert first["ids"] == ids("Where", "?", "<eos>", "Ada", "met", "Bob", "in", "Oslo", "<eos>")  # no <bos>
    assert (first["context_pos"], first["start"], first["end"]) == (3, 7, 7)
    order = [b["input_ids"][:, 0].tolist() for b in spans.train_batches(2, seed=3)]
    rows = {WORDS.index(w): i for i, w in enumerate(["Where", "Who", "Why", "What", "Which"])}
    expected = torch.randperm(5, generator=torch.Generator().manual_seed(3)).tolist()  # base.random_order
    assert [rows[r] for b in order for r in b] == expected


# ----------------------------------------------------------------------------------------------- batched engine


def toy_tagging(n: int) -> QATask:
    rng = random.Random(1)
    names, filler = ["Oslo", "Zoe", "Kimberly"], "the cat sat on a mat while dogs ran across green fields".split()

    def rows(k, split):
        out = []
        for i in range(k):
            ws = [rng.choice(filler) for _ in range(rng.randint(4, 16))]
            name = rng.choice(names)
            ws.insert(rng.randrange(len(ws) + 1), name)
            context = " ".join(ws) + "."
            out.append(ex(f"{split}{i}", "Where did it happen?", context, *([name] if i % 4 else [])))
        return out
    return QATask("toy-tag", {"train": rows(n, "t"), "validation": rows(8, "v"), "test": rows(8, "s")},
                  allow_unanswerable=True)


def test_batched_engine_gives_the_sequential_records(one_thread):
    rng = random.Random(0)
    text = "the cat sat on a mat while dogs ran across green fields Oslo Zoe Kimberly Question Context where"
    tok = train_bpe([" ".join(rng.choice(text.split()) for _ in range(12)) for _ in range(300)], 300)
    protocol = Protocol(name="t", max_steps=8, epochs=2, batch_size=4, eval_batch_size=8, lrs=[1e-3, 3e-3],
                        seeds=[0, 1], max_length=40, dtype="fp32", warmup_fraction=0.25, curve_every=2,
                        qa={"format": "tagging"}, inputs="eos", batch_order="random")
    task = toy_tagging(21)
    task.apply_protocol(protocol)
    task.prepare(tok, 40)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    backbone = Transformer(cfg)
    backbone.init_weights(0)
    weights = backbone.state_dict()
    runs = [(lr, seed) for lr in protocol.lrs for seed in protocol.seeds]
    bodies = list(batched.finetune_grid(task, cfg, weights, runs, protocol=protocol, device=CPU))
    assert sorted((b["lr"], b["seed"]) for b in bodies) == sorted(runs)
    for body in bodies:
        alone = finetune(task, cfg, weights, lr=body["lr"], seed=body["seed"], protocol=protocol, device=CPU)
        assert body["status"] == alone["status"] == "ok" and body["scores"] == alone["scores"]
        assert set(body["scores"]["test"]) == {"score", "token_f1", "standard", "f1", "exact_match"}
        assert [p[1] for p in body["curve"]] == pytest.approx([p[1] for p in alone["curve"]], rel=1e-5)
    # Dropout draws random masks, which vmap refuses: the trial step fails and `auto` trains sequentially.
    task.apply_protocol(protocol.model_copy(update={"tokens": protocol.tokens.model_copy(update={"dropout": 0.1})}))
    task.prepare(tok, 40)
    assert "random" in engines.batched_step_fails(task, cfg, weights, runs[:2], protocol, CPU)


def test_always_abstain_is_a_baseline_wherever_the_cut_input_lost_an_answer(words):
    # Without e3 no question is unanswerable, but at 12 tokens e4's answer ("Rome") is cut off: labelled all 0 as the
    # authors label it, so "no answer" scores it 1 and the baseline that abstains everywhere must be shown.
    from encoderlab.tasks import baselines

    answerable = [e for e in EXAMPLES if e["id"] != "e3"]
    task = tagging_task(answerable, inputs="eos")
    task.prepare(words, max_length=12)
    assert baselines.answers_cut(task, "test") == 1
    abstain = baselines.every(task)["test"]["always_abstain"]
    gold = task.tagging.gold("test")
    by_hand = 100 * sum(1.0 if not g else 0.0 for g in gold) / len(gold)  # {0} vs {0} for the cut one, else 0
    assert abstain["score"] == abstain["token_f1"] == by_hand == 100 / len(answerable)
    task.prepare(words, max_length=64)  # nothing cut, nothing unanswerable: no always-abstain baseline
    assert baselines.answers_cut(task, "test") == 0 and "always_abstain" not in baselines.every(task)["test"]
