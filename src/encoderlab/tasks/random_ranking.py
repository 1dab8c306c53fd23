"""What retrieval's metrics (tasks/metrics.py) expect of a uniformly random ranking of the searched documents: the
random-ranking baseline, exact rather than one seeded draw (one draw of 30 queries gave 20.41 NDCG@10 where 15.15
was expected).

In a random ranking of N documents each document is at each rank with probability 1/N, so by linearity the
expected DCG@k is the searched documents' total gain / N times the sum of the first min(k, N) discounts, and the
expected recall@k is min(k, N) / N of the relevant documents searched. The authors' top-k-only NDCG divides by an
ideal of the k retrieved documents, so it is no linear sum: it is averaged over how many documents of each grade
the k retrieved hold (a multivariate hypergeometric draw), their order within the k random.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Iterator
from functools import lru_cache

Qrels = dict[str, dict[str, int]]


def _discounts(n: int) -> list[float]:
    """The discount of ranks 1..n, as the metrics give it: 1 / log2(rank + 1)."""
    return [1 / math.log2(rank + 1) for rank in range(1, n + 1)]


def _searched_gains(judged: dict[str, int], searched: Container[str]) -> list[int]:
    """The positive gains (negative grades count as 0) of the query's documents that are searched."""
    return [g for d, g in judged.items() if g > 0 and d in searched]


def _mean(values: list[float], what: str) -> float:
    if not values:
        raise ValueError(f"{what}: no query in qrels has a relevant document (grade > 0)")
    return 100.0 * sum(values) / len(values)


def expected_ndcg_at_k(qrels: Qrels, searched: Container[str], n_searched: int, k: int = 10) -> float:
    """E[`ndcg_at_k`] over uniformly random rankings of the `n_searched` documents in `searched`."""
    rank_discount = sum(_discounts(min(k, n_searched)))
    values = []
    for judged in qrels.values():
        grades = sorted((g for g in judged.values() if g > 0), reverse=True)
        if grades:
            ideal = sum(g * d for g, d in zip(grades[:k], _discounts(k)))
            values.append(sum(_searched_gains(judged, searched)) / n_searched * rank_discount / ideal)
    return _mean(values, "expected_ndcg_at_k")


def expected_recall_at_k(qrels: Qrels, searched: Container[str], n_searched: int, k: int = 100) -> float:
    """E[`recall_at_k`] over uniformly random rankings of the `n_searched` documents in `searched`."""
    values = []
    for judged in qrels.values():
        relevant = sum(g > 0 for g in judged.values())
        if relevant:
            values.append(len(_searched_gains(judged, searched)) * min(k, n_searched) / n_searched / relevant)
    return _mean(values, "expected_recall_at_k")


def expected_ndcg_top_k_only(qrels: Qrels, searched: Container[str], n_searched: int, k: int = 10) -> float:
    """E[`ndcg_top_k_only`] over uniformly random rankings of the `n_searched` documents in `searched`."""
    values = []
    taken = min(k, n_searched)
    for judged in qrels.values():
        if any(g > 0 for g in judged.values()):
            levels = tuple(sorted(Counter(_searched_gains(judged, searched)).items()))  # (gain, documents of it)
            values.append(_top_only_expectation(levels, n_searched, taken))
    return _mean(values, "expected_ndcg_top_k_only")


@lru_cache(maxsize=4096)  # queries of a task share few (gain, count) profiles; many grade levels make one costly
def _top_only_expectation(levels: tuple[tuple[int, int], ...], n: int, taken: int) -> float:
    """E[DCG / ideal DCG of the `taken` retrieved documents] when they are a uniformly random ordered draw from `n`
    documents holding `levels` (gain, count) of positive gains; a draw without any gain scores 0. Given which
    documents are drawn, their order is random: E[DCG] is their total gain times the mean of the `taken` discounts."""
    discounts = _discounts(taken)
    mean_discount = sum(discounts) / taken
    total = 0.0
    for counts in _draws([c for _, c in levels], taken):
        drawn = sum(counts)
        ways = math.comb(n - sum(c for _, c in levels), taken - drawn)
        for (_, c), picked in zip(levels, counts):
            ways *= math.comb(c, picked)
        if drawn and ways:
            gains = sorted((g for (g, _), picked in zip(levels, counts) for _ in range(picked)), reverse=True)
            ideal = sum(g * d for g, d in zip(gains, discounts))
            total += ways * sum(gains) * mean_discount / ideal
    return total / math.comb(n, taken)


def _draws(available: list[int], room: int) -> Iterator[list[int]]:
    """Every list of counts, one per level, each at most what the level has, summing to at most `room`."""
    if not available:
        yield []
        return
    for first in range(min(available[0], room) + 1):
        for rest in _draws(available[1:], room - first):
            yield [first, *rest]
