"""Sequence classification under the authors' choices: `inputs: eos`, `classification_head: dense_gelu`,
`batch_order: random`; the tokenisation cache keeps the settings apart; both engines train the new head alike."""
from __future__ import annotations

import math

import pytest
import torch
from test_batched import CPU, compare, setup, tok  # noqa: F401 - tok is a fixture
from torch import nn

from encoderlab.core.errors import DataError
from encoderlab.finetuning import batched
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import finetune, seeded_head
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.base import mean_pool, pad, random_order
from encoderlab.tasks.classification import ClassificationTask, dense_gelu_head

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest

BOS, EOS, PAD = 1, 2, 0


class WordTokenizer:
    """One id per whitespace-separated word, in order of first sight from 10: ids a test can write by hand."""

    bos_id, eos_id, pad_id = BOS, EOS, PAD

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[self.vocab.setdefault(w, 10 + len(self.vocab)) for w in t.split()] for t in texts]


def adopted(task: ClassificationTask, **settings) -> ClassificationTask:
    task.apply_protocol(Protocol(**settings))
    return task


def single(texts=("good movie", "bad film"), labels=(1, 0)) -> ClassificationTask:
    rows = [{"id": f"e{i}", "text": t, "label": y} for i, (t, y) in enumerate(zip(texts, labels))]
    return ClassificationTask("one", {s: rows for s in ("train", "validation", "test")}, ["neg", "pos"])


def pairs() -> ClassificationTask:
    rows = [{"premise": "a cat sat", "hypothesis": "a cat", "label": 0},
            {"premise": "one two three four five", "hypothesis": "six", "label": 1}]
    return ClassificationTask("nli", {s: rows for s in ("train", "validation", "test")}, ["yes", "no"],
                              ("premise", "hypothesis"))


# ---------------------------------------------------------------- inputs


def test_a_single_text_is_text_eos_without_bos():
    words = WordTokenizer()  # good=10 movie=11 bad=12 film=13
    task = adopted(single(), inputs="eos")
    task.prepare(words, 16)
    assert task.ids["train"] == [[10, 11, EOS], [12, 13, EOS]]
    task = adopted(single(), inputs="bos_eos")
    task.prepare(words, 16)
    assert task.ids["train"] == [[BOS, 10, 11, EOS], [BOS, 12, 13, EOS]]


def test_a_text_cut_to_max_length_keeps_its_eos():
    task = adopted(single(["w1 w2 w3 w4", "w5"]), inputs="eos")
    task.prepare(WordTokenizer(), 3)  # w1=10 .. w5=14
    assert task.ids["train"] == [[10, 11, EOS], [14, EOS]] and task.truncated["train"] == 1
    task.prepare(WordTokenizer(), 2)  # one word and EOS: the least there is
    assert task.ids["train"] == [[10, EOS], [14, EOS]]
    with pytest.raises(DataError, match="max_length=1 is too small for task 'one': at least 2"):
        task.prepare(WordTokenizer(), 1)


def test_a_segment_pair_is_a_eos_b_eos_and_the_longer_is_cut_first():
    words = WordTokenizer()  # a=10 cat=11 sat=12 one..five=13..17 six=18
    task = adopted(pairs(), inputs="eos")
    task.prepare(words, 16)
    assert task.ids["train"] == [[10, 11, 12, EOS, 10, 11, EOS], [13, 14, 15, 16, 17, EOS, 18, EOS]]
    task.prepare(words, 6)  # 6 - 2 EOS = 4 text tokens: 3 + 2 words cut to 2 + 2; 5 + 1 to 3 + 1 ("six" kept)
    assert task.ids["train"] == [[10, 11, EOS, 10, 11, EOS], [13, 14, 15, EOS, 18, EOS]]
    with pytest.raises(DataError, match="at least 4"):
        task.prepare(words, 3)
    task = adopted(pairs(), inputs="bos_eos")
    task.prepare(words, 16)
    assert task.ids["train"][0] == [BOS, 10, 11, 12, EOS, 10, 11, EOS]


def test_a_labelled_pair_is_one_text_and_eos():
    words = WordTokenizer()  # Premise:=10 a=11 cat=12 sat=13 Hypothesis:=14
    task = adopted(pairs(), inputs="eos", sentence_pairs="labelled")
    task.prepare(words, 16)
    assert task.ids["train"][0] == [10, 11, 12, 13, 14, 11, 12, EOS]  # "Premise: a cat sat\nHypothesis: a cat"
    task = adopted(pairs(), inputs="bos_eos", sentence_pairs="labelled")
    task.prepare(words, 16)
    assert task.ids["train"][0] == [BOS, 10, 11, 12, 13, 14, 11, 12, EOS]


def test_the_cache_keeps_each_inputs_setting_apart(tok, tmp_path, monkeypatch):  # noqa: F811
    calls = []
    encode = ClassificationTask._encode
    monkeypatch.setattr(ClassificationTask, "_encode", lambda self, *a: calls.append(a[-1]) or encode(self, *a))
    ids = {}
    for inputs in ("bos_eos", "eos", "eos", "bos_eos"):
        task = adopted(single(), inputs=inputs)
        task.prepare(tok, 16, cache_dir=tmp_path)
        assert ids.setdefault(inputs, task.ids) == task.ids
    assert len(calls) == 6 and len(list(tmp_path.glob("classification-one-*.pt"))) == 2  # 2 settings x 3 splits
    assert ids["eos"]["train"][0] == ids["bos_eos"]["train"][0][1:]  # the same text, without its BOS


# ---------------------------------------------------------------- batches, metrics


def test_random_batch_order_is_a_seeded_permutation():
    texts = [" ".join(["w"] * n) for n in range(1, 11)]  # example i has i + 1 words: its length names it
    task = adopted(single(texts, [0, 1] * 5), batch_order="random")
    task.prepare(WordTokenizer(), 16)
    seen = [b["attention_mask"].sum(1).tolist() for b in task.train_batches(4, 7)]
    assert seen == [[i + 3 for i in batch] for batch in random_order(10, 4, 7)]  # i + 1 words, BOS and EOS
    assert task.metric == task.standard_metric == "accuracy"
    assert task.trivial_baseline("test")["standard"] == task.trivial_baseline("test")["accuracy"] == 50.0


# ---------------------------------------------------------------- the dense_gelu head


def test_dense_gelu_head_by_hand():
    head = dense_gelu_head(2, 2, torch.Generator().manual_seed(0))
    with torch.no_grad():
        head[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        head[0].bias.copy_(torch.tensor([0.5, 0.0]))
        head[2].weight.copy_(torch.tensor([[1.0, 1.0], [2.0, 0.0]]))
        head[2].bias.copy_(torch.tensor([0.0, 1.0]))
        out = head(torch.tensor([[1.0, 2.0]]))
    # dense: [1 + 0.5, -2] = [1.5, -2]; exact GELU z * Phi(z): 1.5 * 0.9331928 = 1.3997892, -2 * 0.0227501 =
    # -0.0455003 (the tanh approximation gives 1.3995715 and -0.0454023: 2e-4 and 1e-4 away);
    # classifier: [1.3997892 - 0.0455003, 2 * 1.3997892 + 1] = [1.3542889, 3.7995784]
    torch.testing.assert_close(out, torch.tensor([[1.3542889, 3.7995784]]), atol=1e-6, rtol=0)


def test_dense_gelu_head_is_seeded_dense_first_with_zero_biases():
    head = dense_gelu_head(32, 3, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    dense = torch.empty(32, 32).normal_(0, 0.02, generator=g)
    classifier = torch.empty(3, 32).normal_(0, 0.02, generator=g)
    assert [type(m) for m in head] == [nn.Linear, nn.GELU, nn.Linear] and head[1].approximate == "none"
    assert torch.equal(head[0].weight, dense) and torch.equal(head[2].weight, classifier)
    assert torch.all(head[0].bias == 0) and torch.all(head[2].bias == 0)
    task = adopted(single(), classification_head="dense_gelu")
    assert torch.equal(task.make_head(32, torch.Generator().manual_seed(5))[0].weight, dense)
    assert isinstance(adopted(single()).make_head(32, torch.Generator()), nn.Linear)  # the default is unchanged


def test_logits_are_the_head_on_the_masked_mean_including_eos(tok):  # noqa: F811
    task, cfg, weights, _ = setup("classification", tok)
    task = adopted(task, inputs="eos", classification_head="dense_gelu")
    task.prepare(tok, 48)
    model = Transformer(cfg)
    model.load_state_dict(weights)
    head = task.make_head(cfg.hidden_size, torch.Generator().manual_seed(0))
    seqs = task.ids["train"][:5]
    ids, mask = pad(seqs, tok.pad_id)
    assert (mask == 0).any() and all(s[-1] == tok.eos_id for s in seqs)
    with torch.no_grad():
        hidden = model(ids, causal=False, attention_mask=mask)
        pooled = torch.stack([hidden[i, : len(s)].mean(0) for i, s in enumerate(seqs)])  # every real token, EOS too
        z = pooled @ head[0].weight.T + head[0].bias
        by_hand = 0.5 * z * (1 + torch.erf(z / math.sqrt(2))) @ head[2].weight.T + head[2].bias
        torch.testing.assert_close(task.logits(model, head, ids, mask), by_hand, atol=1e-6, rtol=1e-5)


def test_the_head_computes_what_transformers_eurobert_head_computes():
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "EuroBertForSequenceClassification"):
        pytest.skip("this transformers has no EuroBERT")
    config = transformers.EuroBertConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, num_labels=3,
                                         classifier_pooling="mean", bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    theirs = transformers.EuroBertForSequenceClassification(config).eval()
    # their fresh head is initialised as ours: normal(0, initializer_range = 0.02) weights, zero biases
    assert config.initializer_range == 0.02 and isinstance(theirs.activation, nn.GELU)
    for layer in (theirs.dense, theirs.classifier):
        assert torch.all(layer.bias == 0) and abs(float(layer.weight.detach().std()) - 0.02) < 0.005
    ours = dense_gelu_head(16, 3, torch.Generator().manual_seed(1))
    with torch.no_grad():  # weights large enough that an approximate GELU would show
        for p in ours.parameters():
            p.normal_(0, 1.0)
        theirs.dense.load_state_dict(ours[0].state_dict())
        theirs.classifier.load_state_dict(ours[2].state_dict())
        ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
        mask = (torch.arange(5) < torch.tensor([[5], [3]])).long()
        hidden = theirs.model(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(ours(mean_pool(hidden, mask)), theirs(ids, attention_mask=mask).logits)


def test_both_engines_train_the_dense_gelu_head_alike(tok):  # noqa: F811
    task, cfg, weights, protocol = setup("classification", tok)
    protocol = protocol.model_copy(update={"classification_head": "dense_gelu", "inputs": "eos",
                                           "batch_order": "random"})
    task.apply_protocol(protocol)
    task.prepare(tok, 48)
    assert isinstance(seeded_head(task, cfg.hidden_size, 0), nn.Sequential)  # the premise: runs get the new head
    runs = [(lr, seed) for lr in protocol.lrs for seed in protocol.seeds]
    grid = list(batched.finetune_grid(task, cfg, weights, runs, protocol=protocol, device=CPU))
    assert [(b["lr"], b["seed"]) for b in grid] == sorted(runs, key=lambda r: (r[1], r[0]))
    for body in grid:
        assert body["status"] == "ok" and body["steps"] == 8
        assert body["scores"]["test"]["standard"] == body["scores"]["test"]["accuracy"]
        compare(finetune(task, cfg, weights, lr=body["lr"], seed=body["seed"], protocol=protocol, device=CPU), body)
