"""The per-sentence macro F1 against scikit-learn called as the authors call it, and the seeded dropout's masks."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score
from torch.func import vmap

from encoderlab.tasks.dropout import row_seeds, seeded_dropout
from encoderlab.tasks.metrics import sentence_macro_f1

OUT = 8  # "O" among 9 tags: ids 8 and above share set slots with 0.. (see tokens.vote), irrelevant to the F1


def authors(predictions, references) -> float:
    """Their call, warnings and all: f1_score(true, pred, average="macro") per sentence, the mean."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return 100 * float(np.mean([f1_score(t, p, average="macro") for p, t in zip(predictions, references)]))


def by_hand(predictions, references) -> float:
    """Per sentence, over the tags present in gold or prediction: F1 = 2 TP / (predicted + gold)."""
    per = []
    for p, t in zip(predictions, references):
        tags = set(p) | set(t)
        per.append(sum(2 * sum(a == b == c for a, b in zip(p, t)) / (p.count(c) + t.count(c)) for c in tags)
                   / len(tags))
    return 100 * sum(per) / len(per)


def random_sentences(rng: random.Random, n: int) -> tuple[list[list[int]], list[list[int]]]:
    preds, golds = [], []
    for _ in range(n):
        k = rng.randint(1, 12)
        kind = rng.choice(["mixed", "all_o_right", "all_o_wrong", "all_wrong", "noisy"])
        gold = [OUT if kind.startswith("all_o") or rng.random() < 0.6 else rng.randrange(8) for _ in range(k)]
        if kind == "all_o_right":
            pred = list(gold)
        elif kind == "all_o_wrong":
            pred = [rng.randrange(9) for _ in range(k)]
        elif kind == "all_wrong":  # no tag right anywhere
            pred = [(g + 1 + rng.randrange(8)) % 9 for g in gold]
        else:
            flip = 0.1 if kind == "mixed" else 0.5
            pred = [rng.randrange(9) if rng.random() < flip else g for g in gold]
        preds.append(pred)
        golds.append(gold)
    return preds, golds


@pytest.mark.parametrize("seed", range(5))
def test_sentence_macro_f1_equals_scikit_learn_and_the_hand_formula(seed):
    preds, golds = random_sentences(random.Random(seed), 60)
    assert sentence_macro_f1(preds, golds) == pytest.approx(authors(preds, golds), abs=1e-9)
    assert sentence_macro_f1(preds, golds) == pytest.approx(by_hand(preds, golds), abs=1e-9)


def test_sentence_macro_f1_edge_cases():
    assert sentence_macro_f1([[OUT, OUT, OUT]], [[OUT, OUT, OUT]]) == 100.0  # an all-"O" sentence predicted right
    assert sentence_macro_f1([[1, 2]], [[OUT, OUT]]) == 0.0  # all wrong: "O" missed, 1 and 2 never gold
    assert sentence_macro_f1([[OUT, OUT]], [[1, OUT]]) == pytest.approx(100 * (0 + 2 / 3) / 2)
    assert sentence_macro_f1([[OUT], [1]], [[OUT], [OUT]]) == 50.0  # the mean over sentences, not over words
    assert sentence_macro_f1([["O", "B-X"]], [["O", "O"]]) == pytest.approx(100 * (2 / 3 + 0) / 2)  # names work too
    with pytest.raises(ValueError, match="sentence 0 has 0 predicted tags but 2 reference tags"):
        sentence_macro_f1([[]], [[OUT, OUT]])  # an empty prediction for a sentence
    with pytest.raises(ValueError, match="1 predicted sentences but 2 references"):
        sentence_macro_f1([[OUT]], [[OUT], [OUT]])
    with pytest.raises(ValueError, match="empty sentence"):
        sentence_macro_f1([[]], [[]])
    with pytest.raises(ValueError, match="no sentences"):
        sentence_macro_f1([], [])


# ---------------------------------------------------------------- dropout


def test_seeded_dropout_is_dropout_with_masks_fixed_by_the_row_seeds():
    hidden = torch.ones(64, 40, 32)
    seeds = row_seeds(7, 3, 64)
    out = seeded_dropout(hidden, seeds, 0.1)
    dropped = (out == 0).float().mean().item()
    assert 0.09 < dropped < 0.11  # 81,920 values: 0.1 +- 0.003 (3 standard deviations)
    assert torch.allclose(out[out != 0], torch.tensor(1 / 0.9))  # kept values scaled by 1 / (1 - p)
    assert torch.equal(out, seeded_dropout(hidden, seeds, 0.1))  # a function of the seeds
    assert not torch.equal(out, seeded_dropout(hidden, row_seeds(7, 4, 64), 0.1))  # another batch, other masks
    assert not torch.equal(out[0], out[1])  # rows differ
    assert torch.equal(seeded_dropout(torch.ones(64, 55, 32), seeds, 0.1)[:, :40], out)  # padding changes nothing
    assert seeded_dropout(hidden, seeds, 0.0) is hidden
    stacked = torch.stack([seeds, row_seeds(8, 3, 64)])  # as the batched engine calls it: K runs in one vmap
    batched = vmap(lambda s: seeded_dropout(hidden, s, 0.1))(stacked)
    assert torch.equal(batched[0], out) and torch.equal(batched[1], seeded_dropout(hidden, stacked[1], 0.1))
