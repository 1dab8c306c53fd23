"""The metrics of the evaluation harness, all in percent (0-100) as Python floats.

One function per metric of the paper (docs/paper.md#evaluation): accuracy (sequence classification), entity-level F1
through `seqeval` (token classification; token accuracy for POS; per-sentence macro F1, scikit-learn's, for the
authors' protocol), SQuAD F1 / exact match and token-position F1 (question answering), NDCG@10, top-10-only NDCG
and recall@k (retrieval), plus the aggregation over seeds: mean with a t-distribution 95% confidence interval, and
the std.

Choices that a reader could make differently are stated where they are made:
- `macro_f1` averages over the classes present in the gold labels or the predictions; a class that is neither
  predicted nor gold has an undefined F1 and is ignored (`num_labels` only validates the label range).
- `entity_f1` is seqeval's default (CoNLL `conlleval`-style, lenient to IOB1 and IOB2) micro average; with no
  entity at all, precision/recall/F1 are 0 (seqeval with `zero_division=0`).
- SQuAD follows the official v2.0 script, which equals v1.1 on answerable questions: a gold answer that normalises
  to nothing is dropped, no gold left means unanswerable, and "empty" means empty after normalisation.
- `token_position_f1` (QA as token tagging) compares sets of token positions, an empty set counting as {0}, as the
  paper's authors score it: not SQuAD's word overlap, and against one gold answer only.
- Retrieval ranks by descending score, ties broken by ascending document id. trec_eval / pytrec_eval break ties
  by *descending* docno; without ties `ndcg_at_k` equals their `ndcg_cut_k` (linear gains), averaged over every
  query of the qrels that has a relevant document (like `trec_eval -c`: a query missing from the run scores 0).
- `ndcg_top_k_only` is scikit-learn's `ndcg_score([gains], [scores])` on the k top-ranked documents alone: its ideal
  is over the relevant documents retrieved there, and tied scores share their gains (scikit-learn's default).
"""
from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

# What each metric a record can name means, in one line (model cards and reports print it beside the score).
DEFINITIONS = {
    "accuracy": "share of examples (or, for plain tags, of words) predicted right",
    "entity_f1": "seqeval's entity-level micro F1 (CoNLL conlleval rules)",
    "sentence_macro_f1": "scikit-learn's macro F1 over the tags of each sentence (gold or predicted), averaged over "
                         "sentences (the paper authors' token-classification metric)",
    "f1": "SQuAD word-overlap F1 against the best-matching gold answer (official v2.0 script; no answer = empty)",
    "token_f1": "F1 between the predicted and gold sets of answer-token positions, an empty set counting as {0} "
                "(the paper authors' QA metric)",
    "ndcg@10": "NDCG@10 with linear gains, the ideal over every relevant document (trec_eval's ndcg_cut_10)",
    "ndcg@10_top10_only": "scikit-learn's ndcg_score on the 10 top-ranked documents only, the ideal over the relevant "
                          "ones retrieved (the paper authors' retrieval metric)",
}

__all__ = [
    "accuracy",
    "entity_f1",
    "macro_f1",
    "mean_ci95",
    "ndcg_at_k",
    "ndcg_top_k_only",
    "recall_at_k",
    "sentence_macro_f1",
    "squad_exact",
    "squad_f1",
    "squad_normalize",
    "squad_scores",
    "std",
    "token_accuracy",
    "token_position_f1",
]


def _check_pairs(predictions: Sequence, labels: Sequence, what: str) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{what}: {len(predictions)} predictions but {len(labels)} labels; they must be equal")
    if len(labels) == 0:
        raise ValueError(f"{what}: no examples to score")


# ---------------------------------------------------------------- sequence classification


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Percentage of predictions equal to their label."""
    _check_pairs(predictions, labels, "accuracy")
    correct = sum(int(p) == int(y) for p, y in zip(predictions, labels))
    return 100.0 * correct / len(labels)


def macro_f1(predictions: Sequence[int], labels: Sequence[int], num_labels: int | None = None) -> float:
    """Unweighted mean of per-class F1 over the classes that occur in `labels` or `predictions`.

    A class that is gold but never predicted (or predicted but never gold) has F1 0 and counts. A class that is
    neither has an undefined F1 and is left out, so `num_labels` does not add classes: it only checks that every
    label and prediction lies in [0, num_labels).
    """
    _check_pairs(predictions, labels, "macro_f1")
    preds = [int(p) for p in predictions]
    golds = [int(y) for y in labels]
    if num_labels is not None:
        bad = sorted({c for c in preds + golds if not 0 <= c < num_labels})
        if bad:
            raise ValueError(f"macro_f1: classes {bad} outside [0, {num_labels})")
    f1s = []
    for c in sorted(set(preds) | set(golds)):
        tp = sum(p == c and y == c for p, y in zip(preds, golds))
        n_pred = sum(p == c for p in preds)
        n_gold = sum(y == c for y in golds)
        f1s.append(2.0 * tp / (n_pred + n_gold))  # = 2PR/(P+R); n_pred + n_gold > 0 for a class that occurs
    return 100.0 * sum(f1s) / len(f1s)


# ---------------------------------------------------------------- token classification


def _check_sentences(predictions: list[list[str]], references: list[list[str]], what: str) -> None:
    if len(predictions) != len(references):
        raise ValueError(f"{what}: {len(predictions)} predicted sentences but {len(references)} references")
    for i, (p, r) in enumerate(zip(predictions, references)):
        if len(p) != len(r):
            raise ValueError(f"{what}: sentence {i} has {len(p)} predicted tags but {len(r)} reference tags")


def entity_f1(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision, recall and F1 (seqeval's default CoNLL evaluation).

    An entity counts only when its type and both boundaries match exactly. With no gold and no predicted entity,
    all three are 0 (seqeval's convention with `zero_division=0`).
    """
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

    _check_sentences(predictions, references, "entity_f1")
    p, r, f, _ = precision_recall_fscore_support(
        [list(s) for s in references], [list(s) for s in predictions], average="micro", zero_division=0
    )
    return {"f1": 100.0 * float(f), "precision": 100.0 * float(p), "recall": 100.0 * float(r)}


def token_accuracy(predictions: list[list[str]], references: list[list[str]]) -> float:
    """Percentage of tokens whose tag equals the reference tag, over all sentences (POS tagging)."""
    _check_sentences(predictions, references, "token_accuracy")
    total = sum(len(r) for r in references)
    if total == 0:
        raise ValueError("token_accuracy: no tokens to score")
    correct = sum(p == r for ps, rs in zip(predictions, references) for p, r in zip(ps, rs))
    return 100.0 * correct / total


def sentence_macro_f1(predictions: Sequence[Sequence], references: Sequence[Sequence]) -> float:
    """The mean over sentences of each sentence's macro F1: the unweighted mean F1 of the tags present in its gold or
    predicted tags ("O" included), so a sentence of only "O" predicted right scores 100. Tags are any hashable labels.

    Per sentence this is scikit-learn's `f1_score(reference, prediction, average="macro")`, the authors' call
    (tests/unit/test_tokens_authors_metric.py checks equality on randomised sentences): its labels are those present,
    and its F1 of a label, 2 TP / (2 TP + FP + FN), is 2 TP / (predicted + gold). Computed here because that call
    costs ~1.4 ms a sentence, 10 s per run on CoNLL-2003's validation and test; this costs ~1% of that.
    """
    _check_sentences(predictions, references, "sentence_macro_f1")  # type: ignore[arg-type]
    if not references:
        raise ValueError("sentence_macro_f1: no sentences to score")
    total = 0.0
    for pred, gold in zip(predictions, references):
        if not gold:
            raise ValueError("sentence_macro_f1: an empty sentence has no F1")
        n_pred, n_gold = Counter(pred), Counter(gold)
        right = Counter(p for p, g in zip(pred, gold) if p == g)
        tags = n_pred.keys() | n_gold.keys()
        total += sum(2 * right[t] / (n_pred[t] + n_gold[t]) for t in tags) / len(tags)
    return 100.0 * total / len(references)


# ---------------------------------------------------------------- question answering

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def squad_normalize(text: str) -> str:
    """Official SQuAD v1.1 normalisation: lower case, drop punctuation, drop a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _answerable_golds(golds: list[str]) -> list[str]:
    # The official v2 script drops gold answers that normalise to nothing; none left means unanswerable.
    return [g for g in golds if squad_normalize(g)]


def _token_f1(prediction: str, gold: str) -> float:
    pred_tokens = squad_normalize(prediction).split()
    gold_tokens = squad_normalize(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, golds: list[str]) -> float:
    """Best token-level F1 (normalised tokens, multiset overlap) of `prediction` against any gold answer.

    Unanswerable (no gold, or only golds that normalise to nothing): 100 if the prediction normalises to nothing,
    else 0. An empty prediction for an answerable question scores 0.
    """
    answerable = _answerable_golds(golds)
    if not answerable:
        return 100.0 if not squad_normalize(prediction) else 0.0
    return 100.0 * max(_token_f1(prediction, g) for g in answerable)


def squad_exact(prediction: str, golds: list[str]) -> float:
    """100 if `prediction` equals any gold answer after normalisation, else 0 (same unanswerable rule as F1)."""
    answerable = _answerable_golds(golds)
    pred = squad_normalize(prediction)
    if not answerable:
        return 100.0 if not pred else 0.0
    return 100.0 if any(pred == squad_normalize(g) for g in answerable) else 0.0


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, float]:
    """Mean F1 and exact match over the ids of `references`.

    A missing prediction counts as the empty string (right on unanswerable questions, wrong elsewhere);
    predictions for ids absent from `references` are ignored, as in the official script.
    """
    if not references:
        raise ValueError("squad_scores: no references to score")
    f1 = em = 0.0
    for qid, golds in references.items():
        pred = predictions.get(qid, "")
        f1 += squad_f1(pred, golds)
        em += squad_exact(pred, golds)
    n = len(references)
    return {"f1": f1 / n, "exact_match": em / n}


def token_position_f1(predictions: Sequence[Iterable[int]], references: Sequence[Iterable[int]]) -> float:
    """Mean over questions of the F1 between the predicted and the gold set of token positions (QA as tagging).

    An empty set counts as {0}: position 0 stands for "no answer", so an empty prediction on an unanswerable
    question (empty gold) scores 100, and any other prediction there 0 unless it holds position 0. Per question
    F1 = 2PR / (P + R) with P = shared / predicted, R = shared / gold, which is 2 shared / (predicted + gold), and 0
    when nothing is shared.
    """
    _check_pairs(predictions, references, "token_position_f1")
    total = 0.0
    for pred, gold in zip(predictions, references):
        p, g = set(pred) or {0}, set(gold) or {0}
        total += 2 * len(p & g) / (len(p) + len(g))
    return 100.0 * total / len(references)


# ---------------------------------------------------------------- retrieval


def _ranking(scores: dict[str, float], k: int) -> list[str]:
    """Top k document ids: descending score, ties by ascending document id (deterministic)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]]


def _check_k(k: int, what: str) -> None:
    if k < 1:
        raise ValueError(f"{what}: k must be >= 1, got {k}")


def ndcg_at_k(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], k: int = 10) -> float:
    """Mean NDCG@k over the queries of `qrels` that have a relevant document (grade > 0).

    DCG@k = sum over ranks r = 1..k of grade(doc_r) / log2(r + 1), gain = the relevance grade (negative grades count
    as 0); the ideal DCG ranks the query's qrels by grade. Documents are ranked by descending score, ties by
    ascending document id. A query absent from the run (or with no retrieved document) scores 0; queries of the run
    not in `qrels`, and qrels queries without any positive grade, are skipped.
    """
    _check_k(k, "ndcg_at_k")
    values = []
    for qid, judged in qrels.items():
        grades = sorted((g for g in judged.values() if g > 0), reverse=True)
        if not grades:
            continue
        ideal = sum(g / math.log2(rank + 1) for rank, g in enumerate(grades[:k], start=1))
        ranked = _ranking(run.get(qid, {}), k)
        dcg = sum(max(judged.get(doc, 0), 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked, start=1))
        values.append(dcg / ideal)
    if not values:
        raise ValueError("ndcg_at_k: no query in qrels has a relevant document (grade > 0)")
    return 100.0 * sum(values) / len(values)


def ndcg_top_k_only(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], k: int = 10) -> float:
    """Mean over the queries of `qrels` with a relevant document of scikit-learn's `ndcg_score([gains], [scores])`
    computed on the query's k top-ranked documents only (the paper authors' retrieval metric).

    The k documents are chosen as in `ndcg_at_k` (descending score, ties by ascending document id: a tie across the
    k-th rank is cut there, where the authors' `np.argsort` cut it in an unspecified order). Among those k, as in
    scikit-learn's default (`ignore_ties=False`), documents of equal score share the mean of their gains over their
    ranks, so their order does not matter. Gains are the grades (negative ones 0). The ideal DCG ranks the same k
    documents by gain: it ignores the relevant documents not retrieved, so one relevant document retrieved at any
    rank <= k scores 1 when it is the only relevant one among the k. A query with no relevant document among its
    k (or absent from the run) scores 0, as scikit-learn does for an all-zero `y_true`. Unlike scikit-learn, one
    retrieved document is allowed (its NDCG: 1 if relevant, else 0) instead of raising.
    """
    _check_k(k, "ndcg_top_k_only")
    values = []
    for qid, judged in qrels.items():
        if not any(g > 0 for g in judged.values()):
            continue
        scores = run.get(qid, {})
        ranked = _ranking(scores, k)
        gains = [max(judged.get(doc, 0), 0) for doc in ranked]
        if not any(gains):
            values.append(0.0)
            continue
        discounts = [1 / math.log2(rank + 1) for rank in range(1, len(ranked) + 1)]
        dcg, start = 0.0, 0
        while start < len(ranked):  # one group of equal scores at a time (contiguous: the ranking sorts by score)
            end = start + 1
            while end < len(ranked) and scores[ranked[end]] == scores[ranked[start]]:
                end += 1
            dcg += sum(gains[start:end]) / (end - start) * sum(discounts[start:end])
            start = end
        ideal = sum(g * d for g, d in zip(sorted(gains, reverse=True), discounts))
        values.append(dcg / ideal)
    if not values:
        raise ValueError("ndcg_top_k_only: no query in qrels has a relevant document (grade > 0)")
    return 100.0 * sum(values) / len(values)


def recall_at_k(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], k: int = 100) -> float:
    """Mean over qrels queries with a relevant document of the fraction of relevant documents in the top k.

    Same ranking and skipping rules as `ndcg_at_k`; the denominator is the number of relevant documents even when
    it exceeds k (as trec_eval's `recall_k`).
    """
    _check_k(k, "recall_at_k")
    values = []
    for qid, judged in qrels.items():
        relevant = {doc for doc, g in judged.items() if g > 0}
        if not relevant:
            continue
        top = _ranking(run.get(qid, {}), k)
        values.append(len(relevant.intersection(top)) / len(relevant))
    if not values:
        raise ValueError("recall_at_k: no query in qrels has a relevant document (grade > 0)")
    return 100.0 * sum(values) / len(values)


# ---------------------------------------------------------------- aggregation over seeds


def std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); 0.0 for a single value."""
    if len(values) == 0:
        raise ValueError("std: no values")
    if len(values) == 1:
        return 0.0
    return float(np.std(np.asarray(values, dtype=np.float64), ddof=1))


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% confidence interval, t distribution with n - 1 degrees of freedom.

    half-width = t.ppf(0.975, n - 1) * std(ddof=1) / sqrt(n). With one value the interval is undefined and the
    half-width is nan (not 0: one seed says nothing about the spread).
    """
    if len(values) == 0:
        raise ValueError("mean_ci95: no values")
    from scipy.stats import t

    n = len(values)
    mean = float(np.mean(np.asarray(values, dtype=np.float64)))
    if n == 1:
        return mean, float("nan")
    return mean, float(t.ppf(0.975, n - 1) * std(values) / math.sqrt(n))
