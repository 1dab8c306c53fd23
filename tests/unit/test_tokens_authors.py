"""Token classification as the authors' code runs it: every sub-word labelled, a word's prediction the majority vote
of its sub-words, `ids <eos>` inputs, and the mean over sentences of scikit-learn's macro F1; checked against labels,
votes and F1s written down by hand on a hand-made tokenizer whose sub-words are known."""
from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn

from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.finetuning.protocol import Protocol
from encoderlab.tasks.base import random_order
from encoderlab.tasks.tokens import TokenTask, vote

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest

NER = ["B-LOC", "B-PER", "I-PER", "O"]
LOC, PER, IPER, OUT = 0, 1, 2, 3
X = -100
SENTENCES = [  # (words, tags, the sub-words the hand-made WordPiece vocabulary splits them into)
    (["Zoe", "ran", "in", "Oslo", "."], [PER, OUT, OUT, LOC, OUT], ["Zo", "##e", "ran", "in", "Os", "##lo", "."]),
    (["Kimberly", "Zoe", "sat"], [PER, IPER, OUT], ["Kim", "##ber", "##ly", "Zo", "##e", "sat"]),
    (["the", "cat", "sat"], [OUT, OUT, OUT], ["the", "cat", "sat"]),  # all "O"
    (["Reykjavik"], [LOC], ["Rey", "##k", "##ja", "##vik"]),
]
AUTHORS = {"tokens": {"labels": "all_subwords", "dropout": 0.1, "metric": "sentence_macro_f1"}, "inputs": "eos"}


def hand_tokenizer() -> TextTokenizer:
    vocab = ("<bos> <eos> <pad> <mask> [UNK] the cat sat ran in . Os ##lo Zo ##e Kim ##ber ##ly Rey ##k ##ja "
             "##vik").split()
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return TextTokenizer(tok, 0, 1, 2, 3, origin="hand-made WordPiece")


def hand_task(**protocol) -> TokenTask:
    rows = [{"id": f"s{i}", "tokens": w, "tags": t} for i, (w, t, _) in enumerate(SENTENCES)]
    task = TokenTask("hand", {s: [dict(r) for r in rows] for s in ("train", "validation", "test")}, NER, "iob2")
    task.apply_protocol(Protocol(**protocol))
    task.prepare(hand_tokenizer(), 64)
    return task


class Scripted(nn.Module):
    """A backbone whose hidden state at each position is the one-hot of a scripted tag (looked up by the sequence),
    so that an identity head's argmax is that tag."""

    def __init__(self, script: dict[tuple[int, ...], list[int]]) -> None:
        super().__init__()
        self.script, self.dummy = script, nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, *, causal, attention_mask):
        out = torch.zeros(*input_ids.shape, 4)
        for r, (ids, n) in enumerate(zip(input_ids.tolist(), attention_mask.sum(1).tolist())):
            out[r, torch.arange(n), self.script[tuple(ids[:n])]] = 1.0
        return out


def identity_head() -> nn.Linear:
    head = nn.Linear(4, 4)
    with torch.no_grad():
        head.weight.copy_(torch.eye(4))
        head.bias.zero_()
    return head


def test_the_hand_tokenizer_splits_as_written():
    tok = hand_tokenizer()
    for words, _, pieces in SENTENCES:
        assert [tok.token(i) for i in tok.encode_batch([" ".join(words)])[0]] == pieces


def test_every_sub_word_carries_its_words_tag_and_eos_and_padding_are_ignored():
    task = hand_task(**AUTHORS)
    assert task.ids["train"][1] == [15, 16, 17, 13, 14, 7, 1]  # Kim ##ber ##ly Zo ##e sat <eos>: no <bos>
    expected = [
        [PER, PER, OUT, OUT, LOC, LOC, OUT, X],  # Zo ##e ran in Os ##lo . <eos>
        [PER, PER, PER, IPER, IPER, OUT, X],  # Kim ##ber ##ly Zo ##e sat <eos>
        [OUT, OUT, OUT, X],
        [LOC, LOC, LOC, LOC, X],  # Rey ##k ##ja ##vik <eos>
    ]
    assert [task.sub_word_labels("train", i, len(ids)) for i, ids in enumerate(task.ids["train"])] == expected
    assert task.sub_word_labels("train", 2, 6) == [OUT, OUT, OUT, X, X, X]  # padding
    # encoderlab's first_subword with the same inputs: only the first sub-word of each word
    first = hand_task(inputs="eos")
    assert first.sub_word_labels("train", 0, 8) == [PER, X, OUT, OUT, LOC, X, OUT, X]
    # bos_eos keeps <bos> in front, ignored
    framed = hand_task(tokens=AUTHORS["tokens"])
    assert framed.ids["train"][3] == [0, 18, 19, 20, 21, 1]
    assert framed.sub_word_labels("train", 3, 6) == [X, LOC, LOC, LOC, LOC, X]


def test_a_training_batch_holds_those_labels_in_the_random_order():
    task = hand_task(**AUTHORS, batch_order="random")
    batches = list(task.train_batches(3, seed=5))
    assert [len(b["input_ids"]) for b in batches] == [len(b) for b in random_order(4, 3, 5)]
    order = [i for b in random_order(4, 3, 5) for i in b]
    rows = [(ids, labels) for b in batches for ids, labels in zip(b["input_ids"].tolist(), b["labels"].tolist())]
    for i, (ids, labels) in zip(order, rows):
        n = len(task.ids["train"][i])
        assert ids[:n] == task.ids["train"][i] and labels == task.sub_word_labels("train", i, len(labels))
    assert all(b["dropout_seed"].shape == (len(b["input_ids"]),) for b in batches)
    assert "dropout_seed" not in next(hand_task(inputs="eos").train_batches(3, seed=5))  # dropout 0: today's batch


# Argmax tag per sub-word (then <eos>), and each word's vote written down by hand.
SCRIPT = [
    [PER, OUT, OUT, LOC, LOC, OUT, OUT, OUT],  # Zo ##e: PER/O tie -> PER (lower id); in: LOC (wrong); Os ##lo: LOC
    [OUT, PER, PER, IPER, OUT, OUT, OUT],  # Kim ##ber ##ly: O, PER, PER -> PER; Zo ##e: IPER/O tie -> IPER; sat O
    [OUT, OUT, OUT, LOC],  # right ("O" everywhere; <eos> is not a word)
    [LOC, OUT, OUT, PER, OUT],  # Rey ##k ##ja ##vik: O wins 2 to 1 and 1 -> O (wrong)
]
VOTES = [[PER, OUT, LOC, LOC, OUT], [PER, IPER, OUT], [OUT, OUT, OUT], [OUT]]
# Per sentence, F1 of each tag present in gold or prediction, then their mean:
#   0: PER 1; O: 2 right of 3 gold and 2 predicted -> 4/5; LOC: 1 right of 1 gold and 2 predicted -> 2/3
#   1: all right -> 1;  2: all "O" right -> 1;  3: LOC 0, O 0 -> 0
SENTENCE_F1 = [(1 + 4 / 5 + 2 / 3) / 3, 1.0, 1.0, 0.0]
# seqeval (iob2): gold PER, LOC | PER | - | LOC; predicted PER, LOC(in), LOC(Oslo) | PER | - | -: 3 of 4 and 4.
ENTITY_F1 = 75.0


def test_a_words_prediction_is_its_sub_words_majority_vote_and_scored_per_sentence():
    task = hand_task(**AUTHORS)
    backbone = Scripted({tuple(ids): s for ids, s in zip(task.ids["test"], SCRIPT)})
    assert task.predict(backbone, identity_head(), "test", batch_size=3) == VOTES
    scores = task.evaluate(backbone, identity_head(), "test", batch_size=3)
    assert task.metric == "sentence_macro_f1" and task.standard_metric == "entity_f1"
    assert scores["score"] == scores["sentence_macro_f1"] == pytest.approx(100 * sum(SENTENCE_F1) / 4)
    assert scores["standard"] == scores["f1"] == pytest.approx(ENTITY_F1)
    assert scores["precision"] == scores["recall"] == pytest.approx(75.0)
    assert scores["accuracy"] == pytest.approx(100 * 10 / 12)  # 12 words, "in" and "Reykjavik" wrong
    # the same sub-word predictions read at first sub-words (encoderlab's labels, same inputs): Kimberly -> O,
    # Reykjavik -> LOC. Entities predicted: PER, LOC, LOC | PER (a lone I-PER) | - | LOC: 3 right of 5, gold 4.
    first = hand_task(inputs="eos")
    preds = first.predict(backbone, identity_head(), "test", batch_size=3)
    assert preds == [[PER, OUT, LOC, LOC, OUT], [OUT, IPER, OUT], [OUT, OUT, OUT], [LOC]]
    scores = first.evaluate(backbone, identity_head(), "test", 3)
    assert scores["score"] == scores["standard"] == scores["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35 * 100)


def test_the_vote_breaks_ties_as_the_authors_expression_does():
    assert vote([1, 3]) == vote([3, 1]) == 1  # tags below 8: the lowest id
    assert vote([3, 3, 1]) == 3 and vote([2, 0, 2, 0, 5]) == 0
    # ids that share a slot of the set's 8-slot table (9 and 1): the first inserted comes first
    assert vote([9, 1]) == 9 and vote([1, 9]) == 1


def test_sentence_macro_f1_is_the_default_when_the_protocol_says_entity_f1_but_always_reported():
    task = hand_task()
    assert task.metric == "entity_f1" and task.label_mode == "first_subword" and task.dropout == 0.0
    baseline = task.trivial_baseline("test")  # all "O": F1 of "O" 2h/(n+g) and 0 for the other tags present
    assert baseline["score"] == baseline["standard"] == baseline["f1"] == 0.0
    assert baseline["sentence_macro_f1"] == pytest.approx(100 * ((2 * 3 / 8) / 3 + (2 / 4) / 3 + 1 + 0) / 4)
