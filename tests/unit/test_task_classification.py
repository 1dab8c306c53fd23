"""Sequence classification: encoding, pooling, the loss (overfitting), metrics, baselines, errors, loaders, cache."""
from __future__ import annotations

import json
import random

import datasets
import pytest
import torch

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import train_bpe
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks import classification as cls
from encoderlab.tasks import common
from encoderlab.tasks.base import pad
from encoderlab.tasks.classification import (
    ClassificationTask,
    fit_pair,
    load_glue,
    load_offline_classification,
    load_user_classification,
)

WORDS = ("the cat sat on a mat while dogs ran across green fields and birds sang in tall trees near the old "
         "river where children played with boats made of paper good bad great awful movie film").split()
TEXTS = ["the cat sat on a mat", "dogs ran across green fields", "a great movie", "an awful film",
         "birds sang in tall trees", "children played with paper boats", "the old river", "good"]


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


@pytest.fixture(scope="module")
def tok():
    rng = random.Random(0)
    return train_bpe((" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(300)), 300)


def backbone(tok, seed=0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1))


def examples(texts, labels, field="text"):
    return [{"id": f"e{i}", field: t, "label": y} for i, (t, y) in enumerate(zip(texts, labels))]


def toy(texts=TEXTS, labels=(0, 1, 1, 0, 1, 0, 1, 0), **splits) -> ClassificationTask:
    data = {s: examples(texts, labels) for s in ("train", "validation", "test")}
    return ClassificationTask("toy", {**data, **splits}, ["neg", "pos"])


# ---------------------------------------------------------------- encoding


def test_single_text_is_bos_text_eos_and_truncated(tok):
    task = toy()
    task.prepare(tok, 64)
    assert task.ids["train"][0] == [tok.bos_id, *tok.encode_batch([TEXTS[0]])[0], tok.eos_id]
    assert task.truncated["train"] == 0
    task.prepare(tok, 5)
    assert task.ids["train"][0] == [tok.bos_id, *tok.encode_batch([TEXTS[0]])[0][:3], tok.eos_id]
    assert task.truncated["train"] == sum(len(ids) > 3 for ids in tok.encode_batch(TEXTS))


def test_pair_is_bos_a_eos_b_eos_and_the_longer_is_cut_first(tok):
    long, short = "the cat sat on a mat while dogs ran across green fields", "a movie"
    data = [{"premise": long, "hypothesis": short, "label": 0}, {"premise": short, "hypothesis": long, "label": 1}]
    task = ClassificationTask("pair", {s: data for s in ("train", "validation", "test")}, ["a", "b"],
                              ("premise", "hypothesis"))
    a, b = tok.encode_batch([long, short])
    task.prepare(tok, 64)
    assert task.ids["train"][0] == [tok.bos_id, *a, tok.eos_id, *b, tok.eos_id]
    keep = len(b) + 2  # the short text fits in half the budget: it is kept whole, the long one gets the rest
    assert len(a) > keep
    task.prepare(tok, 3 + len(b) + keep)
    assert task.ids["train"][0] == [tok.bos_id, *a[:keep], tok.eos_id, *b, tok.eos_id]
    assert task.ids["train"][1] == [tok.bos_id, *b, tok.eos_id, *a[:keep], tok.eos_id]
    assert task.truncated["train"] == 2
    assert fit_pair(10, 3, 7) == (4, 3) and fit_pair(3, 10, 7) == (3, 4)
    assert fit_pair(10, 10, 7) == (4, 3) and fit_pair(2, 2, 7) == (2, 2)


# ---------------------------------------------------------------- model, loss, metrics


def test_mean_pooling_ignores_padding(tok):
    task, model = toy(), backbone(tok)
    task.prepare(tok, 64)
    head = task.make_head(32, torch.Generator().manual_seed(0))
    seqs = task.ids["train"]
    ids, mask = pad(seqs, tok.pad_id)
    assert (mask == 0).any()
    noisy = ids.masked_fill(mask == 0, 7)  # other tokens in the padding
    with torch.no_grad():
        logits = task.logits(model, head, ids, mask)
        torch.testing.assert_close(task.logits(model, head, noisy, mask), logits)
        alone = task.logits(model, head, torch.tensor([seqs[0]]), torch.ones(1, len(seqs[0]), dtype=torch.long))
    torch.testing.assert_close(alone[0], logits[0], atol=1e-5, rtol=1e-4)


def test_head_init_is_seeded_with_zero_bias():
    task = toy()
    a, b = (task.make_head(32, torch.Generator().manual_seed(s)) for s in (1, 1))
    c = task.make_head(32, torch.Generator().manual_seed(2))
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)
    assert a.weight.shape == (2, 32) and torch.all(a.bias == 0) and 0.01 < float(a.weight.detach().std()) < 0.04


def test_training_overfits_eight_examples_to_100(tok):
    task, model = toy(), backbone(tok)
    task.prepare(tok, 64)
    head = task.make_head(32, torch.Generator().manual_seed(0))
    start = task.evaluate(model, head, "train", 3)
    assert set(start) == {"score", "standard", "accuracy", "macro_f1"} and start["score"] < 100
    opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=3e-3)
    losses = []
    for epoch in range(50):  # 100 steps of 4 examples
        for batch in task.train_batches(4, seed=epoch):
            assert batch["input_ids"].shape == batch["attention_mask"].shape and len(batch["labels"]) == 4
            loss = task.loss(model, head, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    assert losses[-1] < losses[0] / 10
    scores = task.evaluate(model, head, "train", 3)  # batches of 3 in length order: predictions go back in order
    assert scores == {"score": 100.0, "standard": 100.0, "accuracy": 100.0, "macro_f1": 100.0}
    assert model.training and head.training  # evaluate restored the modes


def test_train_batches_cover_the_epoch_in_a_seeded_order(tok):
    task = toy()
    with pytest.raises(RuntimeError, match="prepare"):
        next(task.train_batches(4, 0))
    task.prepare(tok, 64)
    epoch = lambda seed: [b["labels"].tolist() for b in task.train_batches(3, seed)]  # noqa: E731
    assert epoch(1) == epoch(1) and sorted(sum(epoch(1), [])) == sorted(task.gold["train"])
    assert task.num_train_examples() == 8


def test_trivial_baseline_is_the_train_majority():
    train = examples(["a", "b", "c", "d"], [0, 0, 0, 1])
    test = examples(["a", "b", "c", "d"], [0, 1, 1, 1])
    task = ClassificationTask("t", {"train": train, "validation": train, "test": test}, ["x", "y"])
    assert task.trivial_baseline("test") == {"score": 25.0, "standard": 25.0, "accuracy": 25.0, "macro_f1": 20.0}
    tie = ClassificationTask("t", {"train": examples("ab", [1, 0]), "validation": test, "test": test}, ["x", "y"])
    assert tie.majority_label() == 0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("test"), "missing split"),
    (lambda d: d["validation"].append({"text": "x", "label": 2}), r"labels in validation not seen in train: \['z'\]"),
    (lambda d: d["train"][0].update(label=3), r"label must be an int in \[0, 3\)"),
    (lambda d: d["train"][0].update(label=True), "label must be an int"),
    (lambda d: d["test"][0].update(label="0"), "label must be an int"),
    (lambda d: d["train"][1].update(text="  "), "text field 'text' must be a non-empty string"),
    (lambda d: d["train"][1].pop("text"), "no text field 'text'"),
])
def test_invalid_data_is_refused_before_training(change, message):
    data = {s: examples(["a", "b", "c"], [0, 1, 0]) for s in ("train", "validation", "test")}
    change(data)
    with pytest.raises(DataError, match=message):
        ClassificationTask("bad", data, ["x", "y", "z"])


# ---------------------------------------------------------------- cache


def test_second_prepare_loads_from_cache(tok, tmp_path, monkeypatch):
    calls = []
    encode = ClassificationTask._encode
    monkeypatch.setattr(ClassificationTask, "_encode", lambda self, *a: calls.append(a[-1]) or encode(self, *a))
    first = toy()
    first.prepare(tok, 8, cache_dir=tmp_path)
    assert len(calls) == 3 and len(list(tmp_path.glob("classification-toy-*.pt"))) == 1
    again = toy()
    again.prepare(tok, 8, cache_dir=tmp_path)
    assert len(calls) == 3 and again.ids == first.ids and again.truncated == first.truncated
    toy().prepare(tok, 9, cache_dir=tmp_path)  # another max_length is another key
    toy(texts=[t + " cat" for t in TEXTS]).prepare(tok, 8, cache_dir=tmp_path)  # other data, too
    assert len(calls) == 9 and len(list(tmp_path.glob("classification-toy-*.pt"))) == 3


# ---------------------------------------------------------------- loaders


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def test_offline_loader_reads_the_suite_layout(tmp_path):
    with pytest.raises(DataError, match="encoderlab data prepare offline"):
        load_offline_classification(tmp_path, "toy")
    folder = tmp_path / "tasks" / "toy"
    folder.mkdir(parents=True)
    for s in ("train", "validation", "test"):
        write_jsonl(folder / f"{s}.jsonl", examples(TEXTS[:4], [0, 1, 0, 1]))
    (folder / "task.json").write_text(json.dumps({"family": "classification", "labels": ["neg", "pos"]}))
    task = load_offline_classification(tmp_path / "tasks", "toy")
    assert task.labels == ["neg", "pos"] and task.gold["test"] == [0, 1, 0, 1] and task.name == "toy"
    assert load_offline_classification(tmp_path, "toy").gold == task.gold  # the folder above tasks/ works too
    (folder / "task.json").write_text(json.dumps({"family": "tokens", "labels": ["O"]}))
    with pytest.raises(DataError, match="is a 'tokens' task"):
        load_offline_classification(tmp_path / "tasks", "toy")


def test_glue_from_local_files_holds_out_validation(tmp_path, hf_cache):
    train = [{"sentence": f"text number {i}", "label": i % 2, "idx": i} for i in range(40)]
    write_jsonl(tmp_path / "train.jsonl", train)
    (tmp_path / "validation.csv").write_text('sentence,label\nNA,0\n"a, quoted one",1\n')
    task = load_glue("sst2", str(tmp_path))
    assert [ex["sentence"] for ex in task.splits["test"]] == ["NA", "a, quoted one"]  # "NA" stays text
    assert task.gold["test"] == [0, 1] and task.labels == ["negative", "positive"]
    assert len(task.splits["validation"]) == 2 and len(task.splits["train"]) == 38  # 5% held out
    texts = {ex["sentence"] for s in ("train", "validation") for ex in task.splits[s]}
    assert texts == {r["sentence"] for r in train}
    assert load_glue("sst2", str(tmp_path)).splits["validation"] == task.splits["validation"]  # seeded


def test_glue_pairs_mnli_and_qqp(tmp_path, hf_cache):
    mnli = tmp_path / "mnli"
    mnli.mkdir()
    rows = [{"premise": f"p {i}", "hypothesis": f"h {i}", "label": i % 3} for i in range(60)]
    write_jsonl(mnli / "train.jsonl", rows)
    write_jsonl(mnli / "validation_matched.jsonl", rows[:6])
    task = load_glue("mnli", str(mnli))
    assert task.text_fields == ("premise", "hypothesis") and task.gold["test"] == [0, 1, 2, 0, 1, 2]
    assert len(task.splits["validation"]) == 3
    qqp = tmp_path / "qqp"
    qqp.mkdir()
    (qqp / "train.tsv").write_text("question1\tquestion2\tlabel\n" +
                                   "".join(f'q "{i}\tother {i}\t{i % 2}\n' for i in range(20)) + "lonely\t\t1\n")
    (qqp / "validation.tsv").write_text("question1\tquestion2\tlabel\nwhy\twhy not\t1\n")
    task = load_glue("qqp", str(qqp))
    assert task.dropped == {"train": 1, "official": 0} and task.num_train_examples() == 19
    assert task.splits["test"][0]["question2"] == "why not"


def test_glue_without_a_local_copy_says_the_hub_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="unreachable.*local copy in the same schema") as err:
        load_glue("sst2")
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="no train file"):
        load_glue("sst2", str(tmp_path))


def test_user_classification_maps_string_labels_and_holds_out(tmp_path):
    rows = "".join(f'"review {i}",{"pos" if i % 3 else "neg"}\n' for i in range(40))
    (tmp_path / "train.csv").write_text("body,sentiment\n" + rows)
    (tmp_path / "dev.csv").write_text('body,sentiment\n"fine",pos\n"meh",neg\n')
    task = load_user_classification(str(tmp_path / "train.csv"), str(tmp_path / "dev.csv"), None, "body",
                                    "sentiment")
    assert task.labels == ["neg", "pos"] and task.gold["test"] == [1, 0]
    assert len(task.splits["validation"]) == 2 and task.num_train_examples() == 38
    write_jsonl(tmp_path / "n.jsonl", [{"t": "a", "y": 10}, {"t": "b", "y": 2}, {"t": "c", "y": 2}])
    task = load_user_classification(str(tmp_path / "n.jsonl"), str(tmp_path / "n.jsonl"), str(tmp_path / "n.jsonl"),
                                    ["t"], "y")
    assert task.labels == ["2", "10"] and task.gold["train"] == [1, 0, 0]  # integers sort as numbers
    (tmp_path / "odd.csv").write_text('body,sentiment\n"x",neutral\n')
    with pytest.raises(DataError, match=r"labels in validation not seen in train: \['neutral'\]"):
        load_user_classification(str(tmp_path / "train.csv"), str(tmp_path / "odd.csv"), None, "body", "sentiment")
    with pytest.raises(DataError, match=r"train.csv: row 1 has no column 'text'; columns: \['body', 'sentiment'\]"):
        load_user_classification(str(tmp_path / "train.csv"), str(tmp_path / "dev.csv"), None, "text", "sentiment")
    for name, text in (("blank.csv", 'body,sentiment\n"fine",pos\n"meh", \n'),
                       ("null.jsonl", '{"body": "fine", "sentiment": "pos"}\n{"body": "meh", "sentiment": null}\n')):
        (tmp_path / name).write_text(text)  # an empty label would otherwise become one more class
        with pytest.raises(DataError, match=rf"{name}: row 2 has an empty label \(column 'sentiment'\)"):
            load_user_classification(str(tmp_path / "train.csv"), str(tmp_path / name), None, "body", "sentiment")



def test_user_labels_1_and_1_0_are_one_class(tmp_path):
    """JSON labels written 1 on some rows and 1.0 on others were four classes of a binary task, silently."""
    rows = [{"t": f"text {i}", "y": float(i % 2) if i < 10 else i % 2} for i in range(20)]
    write_jsonl(tmp_path / "f.jsonl", rows)
    task = load_user_classification(str(tmp_path / "f.jsonl"), str(tmp_path / "f.jsonl"), None, "t", "y")
    assert task.labels == ["0", "1"] and task.gold["test"] == [i % 2 for i in range(20)]


def test_csv_labels_1_and_1_0_are_one_class_as_in_jsonl(tmp_path):
    """A CSV column with "1" on some rows and "1.0" on others made two classes where the same JSONL made one."""
    labels = [(1, "1"), (1.0, "1.0"), (-2.0, "-2.00"), (-2, "-2"), (3.0, " 3.0 "), (3, "3"), (0.0, "-0.0")]
    write_jsonl(tmp_path / "f.jsonl", [{"t": f"text {i}", "y": number} for i, (number, _) in enumerate(labels)])
    (tmp_path / "f.csv").write_text("t,y\n" + "".join(f"text {i},{text}\n" for i, (_, text) in enumerate(labels)))
    tasks = [load_user_classification(*[str(tmp_path / f)] * 3, "t", "y") for f in ("f.jsonl", "f.csv")]
    assert tasks[0].labels == tasks[1].labels == ["-2", "0", "1", "3"]
    assert tasks[0].gold["test"] == tasks[1].gold["test"] == [2, 2, 0, 0, 3, 3, 1]
    assert cls.label_name("1.5") == "1.5" and cls.label_name("1.") == "1" and cls.label_name("v1.0") == "v1.0"


def test_user_labels_mixing_numbers_and_names_are_refused(tmp_path):
    """"pos", "neg" and one "1" in train (a wrong column, or a shifted row) were three classes, silently."""
    (tmp_path / "train.csv").write_text("body,sentiment\ngood,pos\nbad,neg\nfine,1\nok,pos\n")
    (tmp_path / "dev.csv").write_text("body,sentiment\nnice,pos\n")
    with pytest.raises(DataError) as caught:
        load_user_classification(str(tmp_path / "train.csv"), str(tmp_path / "dev.csv"), None, "body", "sentiment")
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'train.csv'}: column 'sentiment' mixes numbers and names")
    assert "row 3: '1'" in said and "row 1: 'pos'" in said and "\n" not in said


@pytest.mark.parametrize("labels, said_mix", [
    (["pos", "neg", True, "pos"], "booleans and names as labels (row 3: 'true'; row 1: 'pos')"),
    ([1, 0, False, 1], "numbers and booleans as labels (row 1: '1'; row 3: 'false')")])
def test_user_labels_mixing_booleans_with_names_or_numbers_are_refused(tmp_path, labels, said_mix):
    """A JSON true among "pos" and "neg" became a third class 'true', silently."""
    write_jsonl(tmp_path / "train.jsonl", [{"t": f"text {i}", "y": y} for i, y in enumerate(labels)])
    with pytest.raises(DataError) as caught:
        load_user_classification(*[str(tmp_path / "train.jsonl")] * 3, "t", "y")
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'train.jsonl'}: column 'y' mixes {said_mix}") and "\n" not in said
    write_jsonl(tmp_path / "train.jsonl", [{"t": f"text {i}", "y": i % 2 == 0} for i in range(4)])
    assert load_user_classification(*[str(tmp_path / "train.jsonl")] * 3, "t", "y").labels == ["false", "true"]


def test_names_that_are_true_and_false_among_other_names_load(tmp_path):
    """LIAR's six labels (true, false, half-true, ...) in a TSV were refused as mixing booleans and names: in a
    text file "true" is a name as much as a boolean. A number beside them is still refused."""
    labels = ["true", "false", "half-true", "mostly-true", "barely-true", "pants-fire"]
    rows = "".join(f"claim {i}\t{y}\n" for i, y in enumerate(labels))
    (tmp_path / "train.tsv").write_text("statement\tlabel\n" + rows)
    task = load_user_classification(*[str(tmp_path / "train.tsv")] * 3, "statement", "label")
    assert task.labels == sorted(labels)
    (tmp_path / "train.tsv").write_text("statement\tlabel\nclaim\ttrue\nother\t1\n")
    with pytest.raises(DataError, match="mixes numbers and names as labels .row 2: '1'; row 1: 'true'."):
        load_user_classification(*[str(tmp_path / "train.tsv")] * 3, "statement", "label")


@pytest.mark.parametrize("label, kind", [(["pos"], "a list"), ({"a": 1}, "an object")])
def test_a_json_label_that_is_a_list_or_object_is_refused(tmp_path, label, kind):
    """A JSON list or object as a label became a class of its own, named by its Python repr, silently."""
    rows = [{"t": f"text {i}", "y": "pos" if i % 2 else "neg"} for i in range(6)]
    rows[3]["y"] = label
    write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(DataError) as caught:
        load_user_classification(*[str(tmp_path / "train.jsonl")] * 3, "t", "y")
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'train.jsonl'}: row 4: label (column 'y') is {kind}") and "\n" not in said
    assert "a string, a number or a boolean" in said


@pytest.mark.parametrize("text", ["", "  \t", None, 12, ["a"]])
def test_an_empty_or_non_text_field_is_refused_naming_the_file_and_row(tmp_path, text):
    """It was refused as 'train example 2 (id 'train-2')': no file, a 0-based row and an id the file never had."""
    rows = [{"id": f"r{i}", "t": f"text {i}", "y": "pos" if i % 2 else "neg"} for i in range(6)]
    rows[2]["t"] = text
    write_jsonl(tmp_path / "dev.jsonl", rows)
    write_jsonl(tmp_path / "train.jsonl", [{**r, "t": f"text {i}"} for i, r in enumerate(rows)])
    with pytest.raises(DataError) as caught:
        load_user_classification(str(tmp_path / "train.jsonl"), str(tmp_path / "dev.jsonl"), None, "t", "y")
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'dev.jsonl'}: row 3: text (column 't') must be a non-empty string, got ")
    assert "\n" not in said


def test_train_classes_never_evaluated_are_noted(tmp_path):
    """A train class that neither validation nor test has is legal (learned, never scored) but suspicious: said."""
    (tmp_path / "train.csv").write_text("t,y\n" + "".join(f"x{i},{c}\n" for i, c in enumerate("abcdabcd")))
    (tmp_path / "dev.csv").write_text("t,y\nu,a\nv,b\n")
    (tmp_path / "test.csv").write_text("t,y\nw,b\n")
    files = [str(tmp_path / f) for f in ("train.csv", "dev.csv", "test.csv")]
    task = load_user_classification(*files, "t", "y", name="toy")
    assert task.labels == ["a", "b", "c", "d"]
    assert task.notes == (f"toy: train classes in neither validation nor test ({files[1]}, {files[2]}): ['c', 'd']; "
                          "they are trained on but never tested (a split cut short, or another task's file?)",)
    assert load_user_classification(files[0], files[0], None, "t", "y").notes == ()


def test_the_sweep_says_a_task_files_classes_and_its_notes(tmp_path, tok):
    from encoderlab.finetuning.protocol import Protocol
    from encoderlab.finetuning.task_prep import prepare_tasks

    (tmp_path / "train.csv").write_text("t,y\n" + "".join(f"{w},{c}\n" for w, c in zip(WORDS, "abcd" * 9)))
    (tmp_path / "dev.csv").write_text("t,y\ncat,a\ndog,b\n")
    (tmp_path / "toy.yaml").write_text("family: classification\ntrain: train.csv\nvalidation: dev.csv\n"
                                       "text_column: t\nlabel_column: y\n")
    said: list[str] = []
    prepare_tasks([str(tmp_path / "toy.yaml")], tok, Protocol(name="p", max_steps=2, lrs=[1e-3], seeds=[0],
                                                                max_length=16, dtype="fp32"),
                  cache_dir=None, log=said.append)
    assert said[0].startswith("toy (classification, accuracy, 4 classes): ")
    assert said[1].startswith("toy: train classes in neither validation nor test") and len(said) == 2


def test_csv_labels_with_a_plus_sign_are_the_number_without_it(tmp_path):
    """A CSV's "+1" is the number 1, as its "1.0" is (JSON has no "+1"): "+1", "-1" and "1" made three classes of a
    binary task, and "+1.0" a class of its own."""
    labels = ["+1", "-1", "1", "+1.0", "-1.0", " +1 "]
    (tmp_path / "f.csv").write_text("t,y\n" + "".join(f"text {i},{y}\n" for i, y in enumerate(labels)))
    task = load_user_classification(*[str(tmp_path / "f.csv")] * 3, "t", "y")
    assert task.labels == ["-1", "1"] and task.gold["test"] == [1, 0, 1, 1, 0, 1]
    assert [cls.label_name(v) for v in ("+1.5", "+.5", "+x", "+", "+-1", "++1")] == [
        "1.5", ".5", "+x", "+", "+-1", "++1"]


def test_a_label_is_one_class_in_a_jsonl_train_file_and_a_csv_test_file(tmp_path):
    """JSON's number 1e2 was class "100" but a CSV's text "1e2" stayed "1e2", JSON's true "True" but a CSV's "true"
    "true": a JSONL train file's classes refused the same labels in a CSV test file as unseen."""
    numbers = [1e2, 15.0, 0, 100, -3], ["1e2", "1.5e1", "-0", "+1E+2", "-3e0"], ["-3", "0", "15", "100"]
    for train, test, classes in (numbers, ([True, False, True], ["true", "FALSE", "True"], ["false", "true"])):
        write_jsonl(tmp_path / "train.jsonl", [{"t": f"text {i}", "y": y} for i, y in enumerate(train)])
        (tmp_path / "test.csv").write_text("t,y\n" + "".join(f"text {i},{y}\n" for i, y in enumerate(test)))
        task = load_user_classification(str(tmp_path / "train.jsonl"), str(tmp_path / "train.jsonl"),
                                        str(tmp_path / "test.csv"), "t", "y")
        assert task.labels == classes and task.gold["test"] == task.gold["train"], test


def test_a_number_in_exponent_form_is_its_class_only_where_whole():
    """A whole number is the class of its integer however it is written; other texts stay as written."""
    names = [cls.label_name(v) for v in ("1e2", "-1.5e1", "+2.0E1", "1e-2", "1.25e1", "0e5", "1e400", "e5", "1e",
                                         "12345678901234567891e0", "-0", "007", "TRUE", "tRuE", " false ", 1e2,
                                         True, False, -0.0, "x1e2")]
    assert names == ["100", "-15", "20", "1e-2", "1.25e1", "0", "1e400", "e5", "1e", "12345678901234567891", "0",
                     "007", "true", "tRuE", "false", "100", "true", "false", "0", "x1e2"]


def test_shared_helpers_are_deterministic():
    rest, held = common.holdout([{"i": i} for i in range(100)])
    assert len(held) == 5 and len(rest) == 95 and (rest, held) == common.holdout([{"i": i} for i in range(100)])
    packed = cls.pack_lists([[1, 2], [], [3]])
    assert cls.unpack_lists(packed) == [[1, 2], [], [3]]
