"""Token classification: sub-word alignment, truncation, the loss (overfitting), metrics, errors, loaders, cache."""
from __future__ import annotations

import json
import random

import datasets
import pytest
import torch
from torch import nn

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import train_bpe
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.schemes import derive, first_invalid
from encoderlab.tasks.tokens import (
    TokenTask,
    load_conll_columns,
    load_conll_like,
    load_offline_tokens,
)

NER = ["B-LOC", "B-PER", "I-PER", "O"]
OUT, LOC, PER, IPER = 3, 0, 1, 2
SENTENCES = [  # (words, tags): names are rare words that a tiny BPE splits into several sub-words
    (["Zoe", "Quark", "visited", "Oslo", "."], [PER, IPER, OUT, LOC, OUT]),
    (["the", "cat", "sat", "near", "Oslo"], [OUT, OUT, OUT, OUT, LOC]),
    (["Kimberly", "ran", "across", "green", "fields"], [PER, OUT, OUT, OUT, OUT]),
    (["birds", "sang", "in", "Reykjavik"], [OUT, OUT, OUT, LOC]),
    (["children", "played", "with", "Zoe"], [OUT, OUT, OUT, PER]),
    (["the", "old", "river"], [OUT, OUT, OUT]),
    (["Kimberly", "Quark", "sat"], [PER, IPER, OUT]),
    (["dogs", "ran", "to", "Reykjavik", "and", "Oslo"], [OUT, OUT, OUT, LOC, OUT, LOC]),
]
FILLER = "the cat sat on a mat while dogs ran across green fields and birds sang in tall trees near old river".split()


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


@pytest.fixture(scope="module")
def tok():
    rng = random.Random(0)
    return train_bpe((" ".join(rng.choice(FILLER) for _ in range(12)) for _ in range(300)), 300)


def rows(sentences=SENTENCES):
    return [{"id": f"s{i}", "tokens": list(w), "tags": list(t)} for i, (w, t) in enumerate(sentences)]


def toy(labels=NER, scheme="iob2", **splits) -> TokenTask:
    return TokenTask("toy", {**{s: rows() for s in ("train", "validation", "test")}, **splits}, labels, scheme)


class Oracle(nn.Module):
    """A stand-in backbone that knows the answers: at each kept word's first sub-word its hidden state is the one-hot
    gold tag (looked up by the whole sequence), so an identity `Linear` is a perfect head."""

    def __init__(self, task: TokenTask, split: str = "train") -> None:
        super().__init__()
        self.k, self.dummy, self.table = len(task.labels), nn.Parameter(torch.zeros(1)), {}
        for ids, starts, ex in zip(task.ids[split], task.starts[split], task.splits[split]):
            hidden = torch.zeros(len(ids), self.k)
            for p, t in zip(starts, ex["tags"]):
                if p >= 0:
                    hidden[p, t] = 1.0
            self.table[tuple(ids)] = hidden

    def forward(self, input_ids, *, causal, attention_mask):
        assert causal is False
        out = torch.zeros(*input_ids.shape, self.k)
        for r, (ids, n) in enumerate(zip(input_ids.tolist(), attention_mask.sum(1).tolist())):
            out[r, :n] = self.table[tuple(ids[:n])]
        return out


def linear(k: int, weight: float = 1.0, bias=None) -> nn.Linear:
    head = nn.Linear(k, k)
    with torch.no_grad():
        head.weight.copy_(torch.eye(k) * weight)
        head.bias.copy_(torch.zeros(k) if bias is None else torch.tensor(bias))
    return head


# ---------------------------------------------------------------- alignment


def test_words_are_encoded_like_running_text(tok):
    task = toy()
    task.prepare(tok, 64)
    for i, (words, _) in enumerate(SENTENCES):
        assert task.ids["train"][i] == [tok.bos_id, *tok.encode_batch([" ".join(words)])[0], tok.eos_id]


def test_first_sub_word_carries_the_tag_and_the_rest_is_ignored(tok):
    task = toy()
    task.prepare(tok, 64)
    words, tags = SENTENCES[0]
    pieces = [len(tok.encode_batch([w if j == 0 else " " + w])[0]) for j, w in enumerate(words)]
    assert pieces[0] > 1 and pieces[1] > 1  # "Zoe" and " Quark" split into several sub-words
    firsts = [1 + sum(pieces[:j]) for j in range(len(words))]
    assert task.starts["train"][0] == firsts
    batch = next(b for b in task.train_batches(8, seed=0))
    row = next(r for r in range(8) if batch["input_ids"][r].tolist()[: len(task.ids["train"][0])]
               == task.ids["train"][0] and batch["attention_mask"][r].sum() == len(task.ids["train"][0]))
    expected = [-100] * batch["labels"].shape[1]
    for p, t in zip(firsts, tags):
        expected[p] = t
    assert batch["labels"][row].tolist() == expected  # <bos>, <eos>, later sub-words, padding: all -100


def test_a_perfect_head_scores_100_and_cut_words_are_predicted_o_and_counted(tok):
    task = toy()
    task.prepare(tok, 64)
    head, backbone = linear(4), Oracle(task)
    assert task.truncated["train"] == 0
    scores = task.evaluate(backbone, head, "train", batch_size=3)
    assert scores == {"score": 100.0, "standard": 100.0, "f1": 100.0, "precision": 100.0, "recall": 100.0,
                      "accuracy": 100.0, "sentence_macro_f1": 100.0}
    cut_len = task.starts["train"][7][-1] + 1  # "Oslo", the last word of sentence 7, is the first one cut
    task.prepare(tok, cut_len)
    assert task.starts["train"][7][-1] == -1 and task.starts["train"][7][-2] > 0
    backbone = Oracle(task)  # perfect on the words that are left
    preds = task.predict(backbone, head, "train", batch_size=3)
    expected = [[t if p >= 0 else OUT for p, t in zip(task.starts["train"][i], ex["tags"])]
                for i, ex in enumerate(task.splits["train"])]
    assert preds == expected  # cut words are predicted O, the others keep their (perfect) prediction
    assert task.truncated["train"] == sum(p < 0 for st in task.starts["train"] for p in st) > 0
    scores = task.evaluate(backbone, head, "train", batch_size=3)
    n_words = sum(len(w) for w, _ in SENTENCES)
    missed = sum(t != OUT for i, ex in enumerate(task.splits["train"])
                 for p, t in zip(task.starts["train"][i], ex["tags"]) if p < 0)
    assert scores["accuracy"] == pytest.approx(100 * (n_words - missed) / n_words)  # cut words still counted
    assert scores["recall"] < 100.0 and scores["score"] == scores["f1"] < 100.0


def test_tags_scheme_predicts_the_most_frequent_train_tag_for_cut_words(tok):
    task = toy(labels=["DET", "NOUN", "VERB", "X"], scheme="plain")
    assert task.metric == "accuracy" and task.default_tag == 3  # "X" (index 3) is the most frequent tag
    task.prepare(tok, 6)
    head = linear(4, weight=0.0, bias=[0.0, 1.0, 0.0, 0.0])  # predicts "NOUN" (1) wherever a word is seen
    preds = task.predict(Oracle(task), head, "train", 4)
    assert preds == [[1 if p >= 0 else 3 for p in st] for st in task.starts["train"]]
    assert task.truncated["train"] > 0
    hits = sum(t == (1 if p >= 0 else 3) for i, ex in enumerate(task.splits["train"])
               for p, t in zip(task.starts["train"][i], ex["tags"]))
    scores = task.evaluate(Oracle(task), head, "train", 4)
    assert set(scores) == {"score", "standard", "accuracy", "sentence_macro_f1"}  # no entity F1 without chunks
    assert scores["score"] == scores["standard"] == scores["accuracy"] == pytest.approx(100 * hits / 35)


# ---------------------------------------------------------------- loss, metrics, baselines


def test_training_overfits_eight_sentences_to_f1_100(tok):
    torch.manual_seed(0)
    backbone = Transformer(ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1))
    task = toy()
    task.prepare(tok, 64)
    head = task.make_head(32, torch.Generator().manual_seed(0))
    assert task.evaluate(backbone, head, "train", 3)["score"] < 100
    opt = torch.optim.AdamW([*backbone.parameters(), *head.parameters()], lr=3e-3)
    for epoch in range(50):  # 100 steps of 4 sentences
        for batch in task.train_batches(4, seed=epoch):
            task.loss(backbone, head, batch).backward()
            opt.step()
            opt.zero_grad()
    assert task.evaluate(backbone, head, "train", 3)["score"] == 100.0


def test_trivial_baselines():
    # All "O" (tag 3) per sentence: macro F1 over the tags present, "O"'s F1 = 2 x hits / (predicted + gold) and 0
    # for every other tag: 1/7, 4/9, 4/9, 3/7, 3/7, 1 (all "O"), 1/6, 2/5 for the eight sentences.
    per_sentence = 100 * (1 / 7 + 4 / 9 + 4 / 9 + 3 / 7 + 3 / 7 + 1 + 1 / 6 + 2 / 5) / 8
    assert toy().trivial_baseline("test") == {"score": 0.0, "standard": 0.0, "f1": 0.0, "precision": 0.0,
                                              "recall": 0.0, "accuracy": pytest.approx(100 * 24 / 35),
                                              "sentence_macro_f1": pytest.approx(per_sentence)}
    tags = toy(labels=["DET", "NOUN", "VERB", "X"], scheme="plain")  # the most frequent tag: "X", also 3
    assert tags.trivial_baseline("test") == {"score": pytest.approx(100 * 24 / 35),
                                             "standard": pytest.approx(100 * 24 / 35),
                                             "accuracy": pytest.approx(100 * 24 / 35),
                                             "sentence_macro_f1": pytest.approx(per_sentence)}


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("change, message", [
    (lambda d: d["validation"][2]["tags"].pop(), r"validation example 2 \(id 's2'\): 5 tokens but tags 4"),
    (lambda d: d["train"][0]["tags"].__setitem__(0, 4), r"tag 4 is not an index in \[0, 4\)"),
    (lambda d: d["test"][0].update(tokens=[]), "non-empty list of words"),
    (lambda d: d["test"][0]["tokens"].__setitem__(1, " "), "word 1 is ' '"),
    (lambda d: d.pop("validation"), "missing split"),
])
def test_invalid_data_is_refused(change, message):
    data = {s: rows() for s in ("train", "validation", "test")}
    change(data)
    with pytest.raises(DataError, match=message):
        TokenTask("bad", data, NER, "iob2")


def test_unseen_tags_and_bad_iob_labels():
    no_loc = [(w, [OUT if t == LOC else t for t in tags]) for w, tags in SENTENCES]
    with pytest.raises(DataError, match=r"entity types in validation not seen in train: \['LOC'\]"):
        toy(train=rows(no_loc))
    with pytest.raises(DataError, match=r"tags in validation not seen in train: \['DET'\]"):
        toy(labels=["DET", "NOUN", "VERB", "X"], scheme="plain", train=rows(no_loc))
    no_iper = [(w, [PER if t == IPER else t for t in tags]) for w, tags in SENTENCES]
    assert toy(train=rows(no_iper)).metric == "entity_f1"  # I-PER unseen, but PER is known: allowed (chunking)
    with pytest.raises(DataError, match="train example 's0', word 3: tag 'LOC' is not valid under tag_scheme "
                                        "iob2: not O or B-TYPE, I-TYPE"):
        toy(labels=["LOC", "B-PER", "I-PER", "O"])
    with pytest.raises(DataError, match="tag scheme must be one of iob1, iob2, bioes, plain, got 'bio'"):
        toy(scheme="bio")


@pytest.mark.parametrize("tags, valid", [
    (["B-PER", "I-PER", "O", "B-LOC"], {"iob1", "iob2", "plain"}),
    (["I-PER", "I-PER", "B-PER", "O"], {"iob1", "plain"}),  # IOB1: B- only between two chunks of one type
    (["O", "I-LOC"], {"iob1", "plain"}),
    (["B-PER", "I-PER", "E-PER", "S-LOC", "O"], {"bioes", "plain"}),
    (["B-PER", "I-PER", "O"], {"iob1", "iob2", "plain"}),  # BIOES: the PER chunk is never closed
    (["B-PER", "E-LOC"], {"plain"}),
    (["B_person", "O"], {"plain"}),
])
def test_which_schemes_a_sentence_fits(tags, valid):
    assert {s for s in ("iob1", "iob2", "bioes", "plain") if first_invalid(tags, s) is None} == valid


def test_the_scheme_is_derived_once_and_refused_when_no_chunk_scheme_fits():
    assert derive([["B-PER", "I-PER"], ["O"]]) == "iob2" and derive([["B-PER"], ["O", "I-PER"]]) == "iob1"
    assert derive([["S-PER", "O"], ["B-LOC", "E-LOC"]]) == "bioes" and derive([["NN", "VB"]]) is None
    assert toy(scheme=None).scheme == "iob2" and toy(scheme=None).metric == "entity_f1"
    pos = ["DET", "NOUN", "VERB", "X"]
    with pytest.raises(DataError, match="example 's0', word 0: tag 'NOUN' fits none of iob1, iob2, bioes "
                                        ".*declare tag_scheme: plain"):
        toy(labels=pos, scheme=None)
    assert TokenTask("pos", {s: rows() for s in ("train", "validation", "test")}, pos, None,
                     plain_if_no_chunks=True).metric == "accuracy"


# ---------------------------------------------------------------- cache


def test_second_prepare_loads_from_cache(tok, tmp_path, monkeypatch):
    calls = []
    encode = TokenTask._encode
    monkeypatch.setattr(TokenTask, "_encode", lambda self, *a: calls.append(a[-1]) or encode(self, *a))
    first = toy()
    first.prepare(tok, 7, cache_dir=tmp_path)
    again = toy()
    again.prepare(tok, 7, cache_dir=tmp_path)
    assert len(calls) == 3 and (again.ids, again.starts, again.truncated) == (first.ids, first.starts,
                                                                              first.truncated)
    toy().prepare(tok, 8, cache_dir=tmp_path)
    assert len(calls) == 6 and len(list(tmp_path.glob("tokens-toy-*.pt"))) == 2


# ---------------------------------------------------------------- loaders


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_offline_loader_infers_the_scheme(tmp_path):
    for name, labels in (("ner", NER), ("pos", ["DET", "NOUN", "VERB", "X"])):
        folder = tmp_path / name
        folder.mkdir()
        for s in ("train", "validation", "test"):
            write_jsonl(folder / f"{s}.jsonl", rows())
        (folder / "task.json").write_text(json.dumps({"family": "tokens", "labels": labels}))
    assert load_offline_tokens(tmp_path, "ner").metric == "entity_f1"
    assert load_offline_tokens(tmp_path, "pos").scheme == "plain"
    with pytest.raises(DataError, match="encoderlab data prepare offline"):
        load_offline_tokens(tmp_path, "chunk")


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

"""


def test_conll_columns(tmp_path):
    for s in ("train", "dev"):
        (tmp_path / f"{s}.txt").write_text(CONLL * 30)
    task = load_conll_columns(str(tmp_path / "train.txt"), str(tmp_path / "dev.txt"), None)
    assert task.scheme == "iob2" and task.labels == ["B-MISC", "B-ORG", "B-PER", "I-PER", "O"]
    assert len(task.splits["test"]) == 60 and task.num_train_examples() == 57  # 5% of train held out
    assert task.splits["test"][0] == {"id": "validation-0", "tokens": ["EU", "rejects", "German"], "tags": [1, 4, 0],
                                      "source": (str(tmp_path / "dev.txt"), 3)}
    with pytest.raises(DataError, match="tag 'NNP' fits none of iob1, iob2, bioes"):
        load_conll_columns(str(tmp_path / "train.txt"), str(tmp_path / "dev.txt"), None, tag_column=1)
    pos = load_conll_columns(str(tmp_path / "train.txt"), str(tmp_path / "dev.txt"), str(tmp_path / "dev.txt"),
                             tag_column=1, scheme="plain")
    assert pos.scheme == "plain" and pos.labels == ["JJ", "NNP", "VBZ"] and len(pos.splits["test"]) == 60
    (tmp_path / "odd.txt").write_text(CONLL * 2 + "Anna NNP B-NP B_person\n")
    with pytest.raises(DataError, match=r"odd.txt: line 19: tag 'B_person' is not valid under tag_scheme iob2"):
        load_conll_columns(str(tmp_path / "train.txt"), str(tmp_path / "odd.txt"), None, scheme="iob2")
    (tmp_path / "bad.txt").write_text("EU NNP\n")
    with pytest.raises(DataError, match=r"bad.txt: line 1 has 2 column\(s\) \['EU', 'NNP'\]; .*tag_column=3"):
        load_conll_columns(str(tmp_path / "bad.txt"), str(tmp_path / "dev.txt"), None, tag_column=3)


def test_conll_like_from_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    for s in ("train", "valid", "test"):
        write_jsonl(tmp_path / f"{s}.jsonl", [{"tokens": r["tokens"], "ner_tags": r["tags"]} for r in rows()])
    with pytest.raises(DataError, match="no tag names"):
        load_conll_like("conll2003", str(tmp_path))
    task = load_conll_like("conll2003", str(tmp_path), label_names=NER)
    assert task.metric == "entity_f1" and task.splits["validation"][0]["tokens"] == SENTENCES[0][0]
    (tmp_path / "labels.txt").write_text("\n".join(NER) + "\n")
    assert load_conll_like("uner", str(tmp_path)).labels == NER


@pytest.mark.parametrize("name, text, says", [
    ("labels.json", '{"O": 0, "B-PER": 1, "O": 2}', "labels.json:1: the object at column 1 gives the key 'O' twice"),
    ("labels.json", '["O", "B-PER",', "labels.json:1: not valid JSON (Expecting value, column 15)"),
    ("labels.json", "", "labels.json is empty"),
    ("labels.json", '{"O": 0, "B-PER": 2}', "labels.json: the ids of an object {tag: id} must be 0 to 1, each once"),
    ("labels.json", '{"O": "0", "B-PER": 1}', "labels.json: the ids of an object {tag: id} must be 0 to 1, each once"),
    ("labels.json", '["O", "B-PER", "O"]', "labels.json: the tag 'O' is listed twice"),
    ("labels.json", '["O", {"B": 1}]', "labels.json: tag 2 is {'B': 1}, not a name"),
    ("labels.json", '"O B-PER"', "labels.json: give a list of tag names in id order or an object {tag: id}"),
    ("labels.txt", "O\nB-PER\nO\n", "labels.txt: the tag 'O' is listed twice"),
    ("labels.txt", b"O\nB-\xe9\n", "labels.txt:2: not UTF-8 text"),
])
def test_a_tag_names_file_that_does_not_name_each_tag_once_is_refused(tmp_path, name, text, says):
    """labels.json was read with json.loads as it came: a tag given twice took its last id silently, ids with a gap
    shifted every tag after it, and a file that is not JSON was a traceback. Each is one line naming the file."""
    from encoderlab.tasks.tag_files import tag_names_file

    (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataError) as caught:
        tag_names_file(tmp_path)
    assert says in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_tag_names_in_a_file_are_read_in_id_order(tmp_path):
    from encoderlab.tasks.tag_files import tag_names_file

    (tmp_path / "labels.json").write_text('\ufeff{"B-PER": 1, "O": 0, "I-PER": 2}')
    assert tag_names_file(tmp_path) == ["O", "B-PER", "I-PER"]
    (tmp_path / "labels.json").write_text('["O", "B-PER"]')
    assert tag_names_file(tmp_path) == ["O", "B-PER"]


def test_conll_like_without_a_local_copy_says_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="unreachable.*local copy in the same schema") as err:
        load_conll_like("conll2003")
    assert "\n" not in str(err.value)


def test_conll_lines_end_as_open_ends_them(tmp_path):
    from encoderlab.tasks.tokens import read_conll

    for end in ("\n", "\r\n", "\r"):  # an old Mac's CR alone too: read as one sentence it mislabelled every word
        path = tmp_path / "t.txt"
        path.write_bytes(end.join(["\ufeffEU B-ORG", "rejects O", "", "Peter B-PER", ""]).encode())
        assert read_conll(path) == [(["EU", "rejects"], ["B-ORG", "O"], 1), (["Peter"], ["B-PER"], 4)]
