"""Extractive QA: answer <-> token mapping, windows, span search, unanswerable questions, validation, caching,
an overfitting run, the loaders, and the offline cloze builders. Synthetic data only: no download, no hub."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from encoderlab.core.errors import DataError
from encoderlab.data.offline import qa as offline_qa
from encoderlab.data.tokenizer import train_bpe
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.qa_loaders import _record_rows, load_hub_qa
from encoderlab.tasks.qa import QATask, best_span, char_span_to_tokens
from encoderlab.tasks.qa_loaders import hold_out_articles, load_offline_qa, load_squad_json

NAMES = ["Paris", "Berlin", "Ada Lovelace", "the Rhine", "Zürich", "Mount Kenya", "Oslo", "Nile"]
FILLER = ("the river ran past old towns where people traded grain and cloth while boats carried news "
          "between the hills and the sea").split()


def example(i: int, context: str, question: str, answer: str | None) -> dict:
    if answer is None:
        return {"id": f"q{i}", "context": context, "question": question, "answers": {"text": [], "answer_start": []}}
    start = context.index(answer)
    return {"id": f"q{i}", "context": context, "question": question,
            "answers": {"text": [answer], "answer_start": [start]}}


def small_examples(n: int = 8, seed: int = 0, names_per_context: int = 1) -> list[dict]:
    """Short contexts of filler words holding `names_per_context` names; the answer is one of them."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        names = rng.sample(NAMES, names_per_context)
        words = [rng.choice(FILLER) for _ in range(rng.randint(6, 14))]
        for name in names:
            at = rng.randint(0, len(words))
            words = words[:at] + [name] + words[at:]
        answer = rng.choice(names)
        out.append(example(i, " ".join(words) + ".", f"Where did story {i} happen?", answer))
    return out


@pytest.fixture(scope="module")
def tok():
    texts = [ex["context"] + " " + ex["question"] for ex in small_examples(64)] + [" ".join(FILLER)] * 4
    return train_bpe(texts, 400)


def splits_of(examples: list[dict]) -> dict[str, list[dict]]:
    return {"train": examples, "validation": examples, "test": examples}


def tiny_backbone(vocab_size: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1))


# ----------------------------------------------------------------------------------------------- encoding


def test_answer_char_to_token_mapping_is_exact(tok):
    examples = small_examples(24, seed=3)
    task = QATask("t", splits_of(examples))
    task.prepare(tok, max_length=256)
    windows = task.windows("train")
    assert len(windows) == len(examples)  # short contexts: one window each
    for w in windows:
        ex = examples[w["example"]]
        assert 0 < w["start"] <= w["end"]
        assert tok.decode(w["ids"][w["start"] : w["end"] + 1]).strip() == ex["answers"]["text"][0]
        assert w["ids"][0] == tok.bos_id and w["ids"][-1] == tok.eos_id
        assert w["ids"][w["context_pos"] - 1] == tok.eos_id  # the question ends with <eos>
    offsets = np.array([[0, 3], [3, 9], [9, 15], [15, 16]])  # e.g. "The", " Paris", " today", "."
    assert char_span_to_tokens(offsets, 4, 9) == (1, 1)  # a leading-space token covers " Paris"
    assert char_span_to_tokens(offsets, 4, 15) == (1, 2)
    assert char_span_to_tokens(offsets, 16, 20) is None


def test_long_context_windows_hold_every_answer(tok):
    rng = random.Random(1)
    words = [rng.choice(FILLER) for _ in range(400)]
    for k, name in enumerate(NAMES):
        words[25 + 45 * k] = name
    context = " ".join(words)
    examples = [example(i, context, f"Which name is number {i}?", name) for i, name in enumerate(NAMES)]
    task = QATask("long", splits_of(examples), stride=16)
    task.prepare(tok, max_length=64)
    windows = task.windows("validation")
    assert len(windows) > 3 * len(examples)  # the context really was split
    assert all(len(w["ids"]) <= 64 for w in windows)
    per_example = [[w for w in windows if w["example"] == i] for i in range(len(examples))]
    for i, ws in enumerate(per_example):
        firsts = [w["first_context_token"] for w in ws]
        ends = [w["first_context_token"] + w["context_tokens"] for w in ws]
        assert firsts[0] == 0 and all(b < a_end for b, a_end in zip(firsts[1:], ends))  # overlapping, no gap
        assert all(a_end - b == 16 for b, a_end in zip(firsts[1:], ends[:-1]))  # `stride` tokens of overlap
        hits = [w for w in ws if w["start"] > 0]
        assert hits, f"example {i}: the answer is in no window"
        for w in hits:
            assert tok.decode(w["ids"][w["start"] : w["end"] + 1]).strip() == NAMES[i]
    # SQuAD v1 style: windows without the answer are not trained on, and only context tokens can be predicted.
    assert task.num_train_examples() == sum(w["start"] > 0 for w in task.windows("train"))
    batch = next(task.train_batches(64, seed=0))
    assert (batch["start_positions"] > 0).all() and not batch["allowed"][:, 0].any()
    for row, allowed in zip(batch["input_ids"], batch["allowed"]):
        positions = allowed.nonzero().flatten().tolist()
        assert positions == list(range(positions[0], positions[-1] + 1))  # one contiguous block ...
        assert row[positions[0] - 1] == tok.eos_id and row[positions[-1] + 1] == tok.eos_id  # ... between <eos>s


def test_best_span_respects_order_length_and_context():
    start, end = np.full(12, -10.0), np.full(12, -10.0)
    start[0] = end[0] = 100.0  # position 0 and the question are outside the context [3, 10)
    start[1] = end[2] = 90.0
    start[8], end[5] = 10.0, 9.0  # the best start lies after the best end: not a span
    start[6], end[7] = 1.0, 1.0
    assert best_span(start, end, 3, 10, max_answer_tokens=30) == (2.0, 6, 7)
    assert best_span(start, end, 3, 10, max_answer_tokens=1) == (0.0, 8, 8)  # (6, 7) is 2 tokens long
    # k=1: the top start (8) and top end (5) make no span; the exhaustive fallback still finds the best one.
    assert best_span(start, end, 3, 10, max_answer_tokens=30, k=1) == (2.0, 6, 7)
    assert best_span(start, end, 3, 3, max_answer_tokens=30) is None  # no context tokens
    rng = np.random.default_rng(0)
    for _ in range(50):  # against brute force (15 positions: the top 20 are all of them)
        s, e = rng.normal(size=15), rng.normal(size=15)
        lo, hi, longest = int(rng.integers(0, 5)), int(rng.integers(8, 16)), int(rng.integers(1, 6))
        pairs = [(s[i] + e[j], i, j) for i in range(lo, hi) for j in range(i, min(i + longest, hi))]
        score, i, j = best_span(s, e, lo, hi, longest)
        assert (score, i, j) == pytest.approx(max(pairs))


# ----------------------------------------------------------------------------------------------- unanswerable


def test_unanswerable_questions(tok, monkeypatch):
    answerable = small_examples(4)
    impossible = [example(10 + i, ex["context"], "Who wrote the moon?", None) for i, ex in enumerate(answerable)]
    data = answerable + impossible
    with pytest.raises(DataError, match="q10.*allow_unanswerable"):
        QATask("v2", splits_of(data))
    task = QATask("v2", splits_of(data), allow_unanswerable=True)
    task.prepare(tok, max_length=128)
    train = task.windows("train")
    assert task.num_train_examples() == len(train)  # windows without an answer are kept ...
    assert all(w["start"] == w["end"] == 0 for w in train if w["example"] >= 4)  # ... and point to <bos>
    batch = next(task.train_batches(16, seed=0))
    assert batch["allowed"][:, 0].all()  # position 0 is a legal target only when unanswerable is allowed

    def fake_logits(backbone, head, batch, null=0.0):
        # A span at the first context token (score 2) against the null score `null` for every window.
        s = torch.full(batch["input_ids"].shape, -5.0)
        e = torch.full(batch["input_ids"].shape, -5.0)
        lo = batch["allowed"].float()[:, 1:].argmax(1) + 1
        s[torch.arange(len(lo)), lo], e[torch.arange(len(lo)), lo] = 1.0, 1.0
        s[:, 0], e[:, 0] = null / 2, null / 2
        return s.masked_fill(~batch["allowed"], -1e9), e.masked_fill(~batch["allowed"], -1e9)

    backbone = tiny_backbone(tok.vocab_size)
    monkeypatch.setattr(task, "logits", lambda b, h, batch: fake_logits(b, h, batch, null=3.0))
    assert set(task.predict(backbone, None, "test", 4).values()) == {""}  # null 3 beats span 2
    scores = task.evaluate(backbone, None, "test", 4)
    assert scores["f1"] == pytest.approx(50.0)  # right on the 4 impossible ones, wrong on the 4 others
    monkeypatch.setattr(task, "logits", lambda b, h, batch: fake_logits(b, h, batch, null=1.0))
    assert all(task.predict(backbone, None, "test", 4).values())  # span 2 beats null 1: never empty


# ----------------------------------------------------------------------------------------------- validation


def test_answers_that_are_not_spans_are_refused():
    good = small_examples(3)
    bad = json.loads(json.dumps(good))
    bad[1]["answers"]["answer_start"][0] += 1
    with pytest.raises(DataError, match="'q1'.*not a span"):
        QATask("bad", splits_of(bad))
    missing = json.loads(json.dumps(good))
    del missing[2]["question"]
    with pytest.raises(DataError, match="'q2'.*question"):
        QATask("bad", splits_of(missing))
    with pytest.raises(DataError, match="test split"):
        QATask("bad", {"train": good, "validation": good, "test": []})
    QATask("good", splits_of(good))  # the untouched data passes


def test_prepare_is_cached(tok, tmp_path, monkeypatch):
    import encoderlab.tasks.qa as qa_module

    task = QATask("c", splits_of(small_examples(6)))
    task.prepare(tok, 64, tmp_path)
    files = list(tmp_path.glob("qa-c-*.pt"))
    assert len(files) == 1
    first = task.windows("train")
    files[0].write_bytes(b"")  # a truncated cache file is rebuilt, not trusted
    QATask("c", splits_of(small_examples(6))).prepare(tok, 64, tmp_path)
    assert files[0].stat().st_size > 0
    encoded = []
    monkeypatch.setattr(qa_module, "_encode_split", lambda *a: encoded.append(a) or {})
    again = QATask("c", splits_of(small_examples(6)))
    again.prepare(tok, 64, tmp_path)  # a cache hit: nothing is tokenised again
    assert encoded == [] and again.windows("train") == first
    monkeypatch.undo()
    QATask("c", splits_of(small_examples(6)), stride=8).prepare(tok, 64, tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2  # another stride, another key


# ----------------------------------------------------------------------------------------------- training


def test_overfit_eight_examples(tok):
    # Three names per context: which one is the answer has to be learnt, not read off the capital letter.
    task = QATask("fit", splits_of(small_examples(8, seed=5, names_per_context=3)))
    task.prepare(tok, max_length=64)
    assert task.trivial_baseline("test")["f1"] < 50
    backbone = tiny_backbone(tok.vocab_size, seed=0)
    head = task.make_head(32, torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(list(backbone.parameters()) + list(head.parameters()), lr=3e-3, weight_decay=0.0)
    history = [task.evaluate(backbone, head, "test", 8)["f1"]]
    for step in range(100):
        for batch in task.train_batches(8, seed=step):  # one batch: all 8 examples
            task.loss(backbone, head, batch).backward()
            optimizer.step()
            optimizer.zero_grad()
        if step % 10 == 9:
            history.append(task.evaluate(backbone, head, "test", 8)["f1"])
            if history[-1] == 100.0:
                break
    assert history[0] < 50 and history[-1] == 100.0, history
    assert task.evaluate(backbone, head, "test", 8)["exact_match"] == 100.0


# ----------------------------------------------------------------------------------------------- loaders


def test_squad_json_loader_and_hold_out(tmp_path):
    def squad(n: int, titled: str) -> dict:
        articles = []
        for a in range(n):
            context = f"Article {a} of {titled} was written in Oslo by Ada."
            qas = [{"id": f"{titled}-{a}-0", "question": "Where?",
                    "answers": [{"text": "Oslo", "answer_start": context.index("Oslo")}]},
                   {"id": f"{titled}-{a}-1", "question": "Why?", "answers": [], "is_impossible": True}]
            articles.append({"title": f"{titled} {a}", "paragraphs": [{"context": context, "qas": qas}]})
        return {"data": articles}

    (tmp_path / "train.json").write_text(json.dumps(squad(60, "tr")))
    (tmp_path / "dev.json").write_text(json.dumps(squad(5, "dev")))
    task = load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"))
    assert task.allow_unanswerable and task.name == tmp_path.name
    assert {ex["id"].split("-")[0] for ex in task.splits["test"]} == {"dev"}  # test = the official validation
    titles = {s: {ex["title"] for ex in task.splits[s]} for s in ("train", "validation")}
    assert titles["validation"] and not titles["train"] & titles["validation"]  # whole articles held out
    assert 0.05 <= len(task.splits["validation"]) / 120 < 0.1
    rows = task.splits["train"] + task.splits["validation"]
    shuffled = random.Random(0).sample(rows, len(rows))
    ids = [{r["id"] for r in part} for part in hold_out_articles(rows)]
    assert ids == [{r["id"] for r in part} for part in hold_out_articles(shuffled)]  # seeded, independent of order
    broken = {"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a"}]}]}]}  # no question, no answers
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(DataError, match="broken.json.*SQuAD schema"):
        load_squad_json(str(tmp_path / "broken.json"), str(tmp_path / "dev.json"))


def test_squad_files_out_of_schema_say_where_and_what_is_expected(tmp_path):
    """A top-level list said "missing list indices must be integers or slices, not str"."""
    qa = {"id": "a", "question": "Where?", "answers": [{"text": "x", "answer_start": 0}]}
    cases = [([{"title": "t"}], "the top level is a list, not an object"),
             ({"data": [{"title": "t"}]}, r"data\[0\] has no 'paragraphs' \(keys: title\)"),
             ({"data": [{"paragraphs": [{"context": 3, "qas": []}]}]}, r"data\[0\]\.paragraphs\[0\]\.context is a "
                                                                      "number, not a string"),
             ({"data": [{"paragraphs": [{"context": "x", "qas": [{**qa, "answers": {"text": "x"}}]}]}]},
              r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers is an object, not a list")]
    (tmp_path / "dev.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [qa]}]}]}))
    for doc, where in cases:
        (tmp_path / "train.json").write_text(json.dumps(doc))
        with pytest.raises(DataError, match=rf"train\.json: not in the SQuAD schema: {where}; expected an object "
                                            r'\{"data": \[article, \.\.\.\]\}, each article'):
            load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"))


@pytest.mark.parametrize("flag, said", [("false", "a string"), (2, "a number"), (0.0, "a number"), (None, "null")])
def test_is_impossible_in_a_squad_file_must_be_a_json_boolean(tmp_path, flag, said):
    """is_impossible was tested for truthiness: the string "false" made an answered question unanswerable."""
    qas = [{"id": f"q{i}", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 13}]} for i in range(3)]
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "Ada wrote in Oslo.", "qas": qas}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    qas[1]["is_impossible"] = False
    qas[2]["is_impossible"] = flag
    (tmp_path / "train.json").write_text(json.dumps(doc))
    with pytest.raises(DataError) as caught:
        load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"), str(tmp_path / "dev.json"))
    assert str(caught.value).startswith(f"{tmp_path / 'train.json'}: not in the SQuAD schema: "
                                        f"data[0].paragraphs[0].qas[2].is_impossible is {said}, not true or false")
    qas[2]["is_impossible"] = True
    (tmp_path / "train.json").write_text(json.dumps(doc))
    task = load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"), str(tmp_path / "dev.json"))
    assert [r["answers"]["text"] for r in task.splits["train"]] == [["Oslo"], ["Oslo"], []]


@pytest.mark.parametrize("flag, answered", [(0, True), (1, False)])
def test_is_impossible_written_as_the_integer_0_or_1_is_read_as_false_or_true(tmp_path, flag, answered):
    """A file whose writer gives booleans as 0 and 1 loaded before is_impossible had to be JSON's true or false,
    and read them right; it was refused as 'a number'."""
    qas = [{"id": f"q{i}", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 13}]} for i in range(3)]
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "Ada wrote in Oslo.", "qas": qas}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    qas[2]["is_impossible"] = flag
    (tmp_path / "train.json").write_text(json.dumps(doc))
    task = load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"), str(tmp_path / "dev.json"))
    assert task.splits["train"][2]["answers"]["text"] == (["Oslo"] if answered else [])


@pytest.mark.parametrize("given_test", [True, False])
def test_an_answer_that_is_not_a_span_names_the_squad_file_and_the_example(tmp_path, given_test):
    """It said "QA task 't', train example 'q2': answer ..." without the file the example is in."""
    qas = [{"id": f"q{i}", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 13}]} for i in range(3)]
    doc = {"data": [{"title": f"t{i}", "paragraphs": [{"context": "Ada wrote in Oslo.", "qas": [qa]}]}
                    for i, qa in enumerate(qas)]}  # articles enough to hold one out of train
    (tmp_path / "train.json").write_text(json.dumps(doc))
    qas[2]["answers"][0]["answer_start"] = 16
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    files = [str(tmp_path / "train.json"), str(tmp_path / "dev.json")] + [str(tmp_path / "train.json")] * given_test
    with pytest.raises(DataError) as caught:
        load_squad_json(*files)
    split = "validation" if given_test else "test"
    assert str(caught.value).startswith(f"{tmp_path / 'dev.json'}: QA task '{tmp_path.name}', {split} example 'q2': "
                                        "answer 'Oslo' at 16 is not a span of the context")


@pytest.mark.parametrize("field, value", [("question", ""), ("question", "  \n"), ("context", " ")])
def test_an_empty_question_or_context_in_a_squad_file_is_refused(tmp_path, field, value):
    """An empty question was trained and scored as a question (the context alone to read), where every other family
    refuses an empty text."""
    context = "Ada wrote in Oslo."
    qas = [{"id": f"q{i}", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 13}]} for i in range(3)]
    good = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(good))
    bad = json.loads(json.dumps(good))
    target = bad["data"][0]["paragraphs"][0]
    (target if field == "context" else target["qas"][2])[field] = value
    (tmp_path / "train.json").write_text(json.dumps(bad))
    at = "data[0].paragraphs[0]" + ("" if field == "context" else ".qas[2]")
    with pytest.raises(DataError) as caught:
        load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"), str(tmp_path / "dev.json"))
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'train.json'}: not in the SQuAD schema: {at}.{field} is empty")
    assert "\n" not in said


def test_a_squad_key_given_twice_is_refused_naming_the_line(tmp_path):
    """json kept the last `answers` of a question that gave two, silently."""
    qa = {"id": "a", "question": "Where?", "answers": [{"text": "x", "answer_start": 0}]}
    text = json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [qa]}]}]}, indent=1)
    (tmp_path / "dev.json").write_text(text)
    twice = text.replace('"id": "a",', '"id": "a", "answers": [],')
    (tmp_path / "train.json").write_text(twice)
    line = next(n for n, row in enumerate(twice.splitlines(), 1) if '"id": "a"' in row)
    with pytest.raises(DataError, match=rf"train\.json:{line - 1}: the object at column 7 gives the key 'answers' "
                                        "twice; keys must be unique in an object"):
        load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"))


def test_a_holdout_that_takes_the_only_article_says_so(tmp_path):
    """Without a test file, whole articles are held out of train: one article left "the train split is missing or
    empty", which named neither the holdout nor what to do."""
    context = "Ada wrote in Oslo."
    one = {"data": [{"title": "only", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 13}]}
        for i in range(30)]}]}]}
    (tmp_path / "train.json").write_text(json.dumps(one))
    (tmp_path / "dev.json").write_text(json.dumps(one))
    with pytest.raises(DataError, match=r"train\.json holds 1 article\(s\) \(30 questions\); without a test file, .*"
                                        r"as whole articles .* left none to train on: add a test file \(`test:`\) or "
                                        "more articles"):
        load_squad_json(str(tmp_path / "train.json"), str(tmp_path / "dev.json"))


def test_record_rows_become_spans():
    passage = "Obama met Merkel in Berlin. @highlight\nMerkel said Berlin is ready."
    row = {"passage": passage, "query": "@placeholder welcomed the visit.", "answers": ["Merkel", "Berlin"],
           "entity_spans": {"text": ["Obama", "Merkel", "Berlin"], "start": [0, 10, 20], "end": [4, 15, 25]},
           "idx": {"passage": 3, "query": 7}}
    (rec,) = _record_rows([row])
    assert rec["id"] == "record-3-7" and rec["question"] == row["query"]
    for text, start in zip(rec["answers"]["text"], rec["answers"]["answer_start"]):
        assert passage[start : start + len(text)] == text
    assert rec["answers"]["text"] == ["Merkel", "Berlin"]  # listed entity spans only, here one each
    row["entity_spans"] = None  # no spans recorded: every occurrence is an answer
    assert sorted(_record_rows([row])[0]["answers"]["answer_start"]) == [10, 20, 39, 51]


def test_hub_loader_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="local copy") as err:
        load_hub_qa("squad")
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------------------------- offline builders


def fake_raw() -> dict:
    def sent(text: str) -> list[tuple[str, str, str, str]]:
        rows = []
        for token in text.split():
            word, _, tag = token.partition("/")
            rows.append((word, "NN", "O", tag or "O"))
        return rows

    def doc(k: int, city: str, person: str) -> list:
        head = [sent(f"{person}/B-PER {person}son/I-PER visits {city}/B-LOC today with friends and family ."),
                sent(f"{city.upper()}/B-LOC 1996-08-2{k}")] + [
            sent(f"The mayor of {city}/B-LOC said the visit by {person}/B-PER {person}son/I-PER was good for the town "
                 f"and its people .") for _ in range(3)]
        later = [sent(f"Later {person}/B-PER {person}son/I-PER left {city}/B-LOC for the coast by train ."),
                 sent(f"Officials in {city}/B-LOC thanked the guest for the long visit .")]
        return head + later

    conll = {split: [doc(k, city, person) for k, (city, person) in enumerate(pairs)]
             for split, pairs in (("train", [("Lyon", "Karl"), ("Porto", "Anna")]), ("validation", [("Graz", "Olaf")]),
                                  ("test", [("Turku", "Mia")]))}
    wiki, units = [], {}
    for i, (title, split) in enumerate([("Alpha Town", "train"), ("Beta Town", "train"), ("Gamma Town", "train"),
                                        ("Delta Town", "validation"), ("Epsilon Town", "validation"),
                                        ("Zeta Town", "validation"), ("Eta Town", "test"), ("Theta Town", "test"),
                                        ("Iota Town", "test")]):
        river = ["Danube", "Loire", "Rhone"][i % 3]
        extract = (f"{title} is a market town on the {river} River in Old Country. {title} was founded in "
                   f"{1200 + i} by merchants from Old Country. The {river} River floods the lower streets of "
                   f"{title} every spring.")
        wiki.append({"title": title, "extract": extract, "description": f"Settlement number {i}", "topic": "Geo"})
        units[title] = split
    return {"wiki": wiki, "conll": conll, "reviews": {}, "units": {"wikipedia": units}}


def test_offline_builders_spans_splits_and_determinism(tmp_path):
    raw = fake_raw()
    stats, eval_texts = offline_qa.build_qa_tasks(raw, tmp_path / "a")
    assert set(stats) == {"conll-cloze", "wiki-cloze", "wiki-title-span"}
    split_of = raw["units"]["wikipedia"]
    leads = {a["title"]: a["extract"] for a in raw["wiki"]}
    for name in stats:
        for split in ("train", "validation", "test"):
            rows = [json.loads(x) for x in (tmp_path / "a" / name / f"{split}.jsonl").read_text().splitlines()]
            assert rows, (name, split)
            assert stats[name]["splits"][split]["examples"] == len(rows)
            for r in rows:
                for text, start in zip(r["answers"]["text"], r["answers"]["answer_start"]):
                    assert r["context"][start : start + len(text)] == text
                assert "@placeholder" in r["question"] or name == "wiki-title-span"
                if name == "conll-cloze":
                    assert r["id"].startswith(f"conll-{split}-")
                    city = {"train": ("Lyon", "Porto"), "validation": ("Graz",), "test": ("Turku",)}[split]
                    assert any(c in r["context"] for c in city)  # the passage comes from a document of this file
                else:
                    assert split_of[r["title"]] == split
                    # every lead in the passage belongs to the same split (wiki-cloze: the lead minus a sentence)
                    inside = [t for t in leads if t in r["context"]]
                    assert inside and all(split_of[t] == split for t in inside)
                if split != "train":
                    assert r["context"] in eval_texts and r["question"] in eval_texts
        task = json.loads((tmp_path / "a" / name / "task.json").read_text())
        assert task["family"] == "qa" and task["recipe"] == offline_qa.RECIPE
        assert load_offline_qa(tmp_path / "a", name).name == name  # the files load as a QA task
    train_contexts = {json.loads(x)["context"] for n in stats
                      for x in (tmp_path / "a" / n / "train.jsonl").read_text().splitlines()}
    assert not train_contexts & set(eval_texts)
    # Same input, shuffled order: byte-identical files.
    shuffled = fake_raw()
    random.Random(0).shuffle(shuffled["wiki"])
    offline_qa.build_qa_tasks(shuffled, tmp_path / "b")
    for name in stats:
        for f in ("train.jsonl", "validation.jsonl", "test.jsonl", "stats.json"):
            assert (tmp_path / "a" / name / f).read_bytes() == (tmp_path / "b" / name / f).read_bytes(), (name, f)


def test_sentence_splitter_and_cloze_candidates():
    text = "Dr. Smith lived in St. Louis. He met J. R. R. Tolkien in 1950. The U.S. Army came later! It rained."
    assert offline_qa.split_sentences(text) == [
        "Dr. Smith lived in St. Louis.", "He met J. R. R. Tolkien in 1950.", "The U.S. Army came later!",
        "It rained."]
    sentence = "The Roman Empire ruled cross-border lands near Rome and other lands."
    found = offline_qa._cloze_candidates(sentence, "Rome was the capital of the Roman Empire. Its lands and "
                                                   "border were vast.")
    assert sorted(found) == [(0, 4, "Roman Empire"), (1, sentence.index("Rome"), "Rome")]
    # not "border" (a fragment of "cross-border"), not "lands" (twice in the sentence: the blank would be ambiguous)
