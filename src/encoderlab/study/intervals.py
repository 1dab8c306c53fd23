"""A category's score and its 95% interval, and the interval of two models' difference (docs/evaluation.md,
"Intervals").

A category's score is the plain mean of its k datasets' scores, each the mean over its n_d seeds of the kept run. Seed
i of one dataset shares nothing with seed i of another but a number (each dataset's runs are fine-tuned on their own
data), so the datasets' means are independent estimates:

    Var(category) = sum_d v_d,  v_d = s_d^2 / n_d / k^2   (s_d: the sd of dataset d's kept scores over seeds)
    df = (sum_d v_d)^2 / sum_d (v_d^2 / (n_d - 1))        (Welch-Satterthwaite)
    95% interval: mean ± t(0.975, df) x sqrt(Var)

Two models' fine-tuning runs are independent too (each fine-tunes its own checkpoint), so the variance of A - B is
the sum of both sides' and its df is Welch-Satterthwaite's over every dataset term of both. Seeds are never paired
across models: nothing in a study's records shows that seed i of two checkpoints makes their scores move together,
and pairing unrelated runs narrows the interval without cause. The one dependence the records do show is within a
model: datasets scored by one shared trained model (`estimates`), which count as one estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import stats

from encoderlab.tasks.baselines import LABELS
from encoderlab.tasks.metrics import std


@dataclass(frozen=True)
class Spread:
    """The variance terms of a mean of independent means: per dataset, (its share of the variance, its df)."""

    terms: tuple[tuple[float, int], ...] = ()

    @property
    def defined(self) -> bool:
        """A dataset with one seed has no variance estimate, and neither has any mean it enters."""
        return bool(self.terms) and all(dof >= 1 for _, dof in self.terms)

    @property
    def variance(self) -> float:
        return sum(v for v, _ in self.terms)

    @property
    def df(self) -> float | None:
        """Welch-Satterthwaite's degrees of freedom; None where nothing varies (no t quantile applies)."""
        denom = sum(v * v / dof for v, dof in self.terms if v > 0)
        return self.variance ** 2 / denom if self.defined and denom > 0 else None

    def half_width(self, q: float = 0.975) -> float | None:
        """t(q, df) x SE; 0.0 where every dataset's seeds agree, None where a dataset has one seed."""
        if not self.defined:
            return None
        if self.df is None:
            return 0.0
        return float(stats.t.ppf(q, self.df) * math.sqrt(self.variance))

    def __add__(self, other: Spread) -> Spread:
        """The spread of a difference (or sum) of two independent estimates."""
        return Spread(self.terms + other.terms)


def spread_of(datasets: list[list[float]], weights: list[float] | None = None) -> Spread:
    """The spread of a weighted mean of independent estimates, each given as its seeds' scores (weights: 1/k each,
    the plain mean of k datasets)."""
    weights = weights or [1 / len(datasets)] * len(datasets)
    return Spread(tuple(((w * w * std(xs) ** 2 / len(xs) if len(xs) > 1 else 0.0), len(xs) - 1)
                        for w, xs in zip(weights, datasets)))


def estimates(members: list) -> list[list]:
    """The category's datasets grouped into independent estimates. Datasets scored by one shared trained model
    (a protocol's `retrieval.train_on`: their records name the same other task as `trained_on`) whose kept runs are
    the same LR on the same seeds are one estimate: seed i's scores on them come from one model, so they move
    together and are averaged per seed before the variance is taken. Every other dataset is an estimate of its own."""
    shared: dict[str, list] = {}
    out = []
    for t in members:
        trained = (t.summary or {}).get("trained_on")
        if trained and trained != t.task:
            shared.setdefault(trained, []).append(t)
        else:
            out.append([t])
    for group in shared.values():
        one = all(t.lr_by_seed == group[0].lr_by_seed and set(t.by_seed) == set(group[0].by_seed) for t in group)
        out += [group] if one else [[t] for t in group]
    return out


@dataclass
class CategoryScore:
    mean: float
    ci95: float | None
    spread: Spread
    datasets: int
    baseline: float | None = None  # the mean of its datasets' trivial baselines (None when one has none)
    constant: list[str] = field(default_factory=list)  # `task: what it predicts`, for tasks that predict a constant
    # `task: what it predicts (n of m kept runs)` for tasks where most kept runs predict a constant
    mostly_constant: list[str] = field(default_factory=list)
    lexical: float | None = None  # the mean of its datasets' strongest baselines (None when one has none)
    lexical_names: str = ""  # which baselines those are ("BM25", "TF-IDF + LR / majority class")
    above_lexical: int = 0  # datasets where the model's score is above their strongest baseline
    without_constant: CategoryScore | None = None  # the same category without its mostly-constant tasks

    @property
    def seeds(self) -> int:
        """The fewest seeds of any of its datasets."""
        return min((dof + 1 for _, dof in self.spread.terms), default=0)


def category_score(members: list, with_rest: bool = True) -> CategoryScore:
    """The category score of its datasets' TaskScores (each with its kept scores by seed); see the module's rule."""
    seeds = [list(t.by_seed.values()) for t in members]
    mean = sum(sum(xs) / len(xs) for xs in seeds) / len(seeds)
    groups = estimates(members)
    spread = spread_of([[sum(t.by_seed[s] for t in g) / len(g) for s in sorted(g[0].by_seed)] for g in groups],
                       [len(g) / len(members) for g in groups])
    bases = [t.baseline for t in members]
    strongest = [(t.summary or {}).get("strongest_baseline") for t in members]
    names = list(dict.fromkeys(LABELS.get(s["name"], s["name"]) for s in strongest if s))  # in dataset order
    out = CategoryScore(mean, spread.half_width(), spread, len(members),
                        None if None in bases else sum(bases) / len(bases),
                        [f"{t.task}: {t.constant}" for t in members if t.constant],
                        [f"{t.task}: {t.mostly_constant}" for t in members if t.mostly_constant],
                        None if None in strongest else sum(s["value"] for s in strongest) / len(strongest),
                        " / ".join(names),
                        sum(1 for t, s in zip(members, strongest) if s and t.test is not None and t.test > s["value"]))
    rest = [t for t in members if not t.mostly_constant]
    if with_rest and out.mostly_constant and rest:
        out.without_constant = category_score(rest, with_rest=False)
    return out
