"""Category intervals over datasets whose seeds are independent by construction: the category score's interval and
that of two models' difference equal the analytic ones (the variance of a mean of independent means, Welch-
Satterthwaite's df), and datasets scored by one shared trained model count as one estimate."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from encoderlab.finetuning import records
from encoderlab.study.results import StudyResults
from tests.unit.test_study_verdicts import CLM, MLM, PROTOCOL, write_study


def put(root: Path, label: str, task: str, scores: list[float], family: str = "classification", **extra) -> None:
    """One record per seed of `label` on `task`, its test score given."""
    key = records.protocol_key(PROTOCOL)
    for seed, score in enumerate(scores):
        records.write(records.record_path(root / "evals", f"tag-{label}", key, task, "0" * 16, 0.001, seed), {
            "tag": f"tag-{label}", "task": task, "family": family, "metric": "accuracy", "status": "ok",
            "fingerprint": "0" * 16, "protocol": PROTOCOL, "lr": 0.001, "seed": seed,
            "baseline": {s: {"score": 0.0} for s in ("validation", "test")},
            "scores": {"validation": {"score": score}, "test": {"score": score}}, **extra})


def analytic(datasets: list[list[float]]) -> tuple[float, float, float]:
    """(mean, variance, df) of the plain mean of independent dataset means."""
    k = len(datasets)
    v = [np.var(xs, ddof=1) / len(xs) / k**2 for xs in datasets]
    df = sum(v) ** 2 / sum(x * x / (len(xs) - 1) for x, xs in zip(v, datasets))
    return float(np.mean([np.mean(xs) for xs in datasets])), float(sum(v)), float(df)


def test_a_category_interval_is_that_of_independent_dataset_means(tmp_path):
    rng = np.random.default_rng(0)
    seeds = len(PROTOCOL["seeds"])
    root = write_study(tmp_path, {}, tasks={})
    scores = {lb: {t: list(rng.normal(level, sd, seeds)) for t, sd in (("sc-a", 1.0), ("sc-b", 4.0))}
              for lb, level in ((CLM, 60.0), (MLM, 63.0))}
    for lb, tasks in scores.items():
        for task, xs in tasks.items():
            put(root, lb, task, xs)
    res = StudyResults(root)
    for lb in (CLM, MLM):
        mean, var, df = analytic(list(scores[lb].values()))
        cat = res.categories[lb]["SC"]
        assert cat.mean == pytest.approx(mean, abs=1e-9)
        assert cat.ci95 == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(var), abs=1e-9)
    # the difference: both sides' variances summed, Welch-Satterthwaite's df over all four dataset terms
    [c] = res.versus(MLM, CLM)
    both = list(scores[MLM].values()) + list(scores[CLM].values())
    v = [np.var(xs, ddof=1) / len(xs) / 4 for xs in both]
    df = sum(v) ** 2 / sum(x * x / (seeds - 1) for x in v)
    se = math.sqrt(sum(v))
    assert c.ci95 == pytest.approx(stats.t.ppf(0.975, df) * se, abs=1e-9)
    assert c.p == pytest.approx(2 * stats.t.sf(abs(c.diff) / se, df), abs=1e-9)
    assert c.mde == pytest.approx((stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se, abs=1e-9)


def test_seed_i_of_two_datasets_is_not_paired(tmp_path):
    # Two datasets whose seeds run in opposite directions: a per-seed category average would be flat (± 0) and claim
    # a precision no dataset has; as independent estimates the category keeps both datasets' noise.
    root = write_study(tmp_path, {}, tasks={})
    put(root, CLM, "sc-a", [50.0 + s for s in range(8)])
    put(root, CLM, "sc-b", [70.0 - s for s in range(8)])
    cat = StudyResults(root).categories[CLM]["SC"]
    mean, var, df = analytic([[50.0 + s for s in range(8)], [70.0 - s for s in range(8)]])
    assert cat.mean == pytest.approx(60.0) and cat.ci95 == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(var))
    assert cat.ci95 > 1.0


def test_datasets_scored_by_one_shared_model_are_one_estimate(tmp_path):
    # retrieval.train_on: seed i's model scores both datasets, so their per-seed mean is the estimate
    root = write_study(tmp_path, {}, tasks={})
    a, b = [10.0 + s for s in range(8)], [30.0 - s for s in range(8)]
    for task, xs in (("ir-a", a), ("ir-b", b)):
        put(root, CLM, task, xs, family="retrieval", trained_on={"task": "ir-train", "fingerprint": "1" * 16})
    cat = StudyResults(root).categories[CLM]["IR"]
    assert cat.mean == pytest.approx(20.0) and cat.ci95 == 0.0  # every seed's model averages 20 on the two


def test_a_cell_without_an_interval_says_why_not_a_bare_mean(tmp_path):
    """A dataset with one seed showed '21.43' in the per-dataset and category tables, read as exact; every seed
    alike showed it too in the per-dataset table. Each now says why no interval stands beside it."""
    from encoderlab.study.report import _score_cell
    from encoderlab.study.standing import category_cell

    root = write_study(tmp_path, {}, tasks={})
    put(root, CLM, "sc-a", [21.43])
    put(root, MLM, "sc-a", [40.0, 40.0, 40.0])
    put(root, MLM, "sc-b", [50.0, 52.0])
    put(root, MLM, "tc-a", [10.0], family="tokens")
    put(root, MLM, "tc-b", [20.0, 21.0, 23.0], family="tokens")
    res = StudyResults(root)
    assert category_cell(res.categories[MLM]["TC"]) == "15.67 ± undefined (a dataset with one seed)"
    assert category_cell(res.categories[CLM]["SC"]) == "21.43 ± undefined (one seed)"
    assert _score_cell(res.tasks[CLM]["sc-a"]).startswith("21.43 ± undefined (one seed) (lr 0.001; ")
    assert _score_cell(res.tasks[MLM]["sc-a"]).startswith("40.00 ± undefined (zero variance) (lr 0.001; ")
    assert _score_cell(res.tasks[MLM]["sc-b"]).startswith(f"51.00 ± {res.tasks[MLM]['sc-b'].ci95:.2f} (")
    assert category_cell(res.categories[MLM]["SC"]) == f"45.50 ± {res.categories[MLM]['SC'].ci95:.2f}"
