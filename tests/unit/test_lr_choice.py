"""How a dataset's score is read off the LR x seed grid (finetuning/aggregate.py `choose_runs`, `summarize`): each
seed's own best-validation LR (per_seed) or one LR for all seeds (mean_over_seeds), ties to the smallest LR, on the
protocol's metric or the standard one; and a study's results follow its protocol's `lr_choice`."""
from __future__ import annotations

import pytest

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_json
from encoderlab.finetuning import records
from encoderlab.finetuning.aggregate import choose_runs, summarize
from encoderlab.study.results import StudyResults

# (lr, seed, validation, test)
GRID = [(1e-5, 0, 70.0, 60.0), (1e-4, 0, 80.0, 80.0),
        (1e-5, 1, 90.0, 82.0), (1e-4, 1, 75.0, 70.0),
        (1e-5, 2, 85.0, 84.0), (1e-4, 2, 85.0, 99.0)]  # seed 2: equal validation scores


def test_per_seed_keeps_each_seeds_best_validation_run_and_the_smallest_lr_on_ties():
    kept = choose_runs(GRID, "per_seed")
    # seed 0: 80 > 70 -> 1e-4; seed 1: 90 > 75 -> 1e-5; seed 2: 85 = 85 -> the smaller LR, 1e-5 (test 84, not 99)
    assert kept == {0: (1e-4, 80.0, 80.0), 1: (1e-5, 90.0, 82.0), 2: (1e-5, 85.0, 84.0)}
    assert choose_runs(list(reversed(GRID)), "per_seed") == kept  # the order runs come in does not matter


def test_mean_over_seeds_keeps_one_lr_for_every_seed_among_lrs_run_on_every_seed():
    # mean validation: 1e-5 (70 + 90 + 85) / 3 = 81.67, 1e-4 (80 + 75 + 85) / 3 = 80
    assert choose_runs(GRID, "mean_over_seeds") == {0: (1e-5, 70.0, 60.0), 1: (1e-5, 90.0, 82.0),
                                                    2: (1e-5, 85.0, 84.0)}
    # a lone lucky seed at 5e-4 (validation 99) does not compete with LRs run on all three seeds
    assert choose_runs([*GRID, (5e-4, 0, 99.0, 99.0)], "mean_over_seeds")[0][0] == 1e-5
    # when no LR ran on every seed, all compete; equal means: the smaller LR
    ties = [(1e-4, 0, 50.0, 1.0), (1e-5, 1, 50.0, 2.0)]
    assert choose_runs(ties, "mean_over_seeds") == {1: (1e-5, 50.0, 2.0)}
    with pytest.raises(EncoderlabError, match="lr_choice 'best' is not one of mean_over_seeds, per_seed"):
        choose_runs(GRID, "best")


def record(lr, seed, val, test, *, standard=None, lr_choice=None, finished="2025-01-01", task="t"):
    scores = {"validation": {"score": val}, "test": {"score": test}}
    if standard is not None:
        scores = {s: {**v, "standard": standard[i]} for i, (s, v) in enumerate(scores.items())}
    protocol = {} if lr_choice is None else {"lr_choice": lr_choice}
    return {"task": task, "family": "classification", "metric": "accuracy", "status": "ok", "lr": lr, "seed": seed,
            "protocol": protocol, "finished": finished, "scores": scores,
            "baseline": {"test": {"score": 50.0, "standard": 40.0}}}


def test_summarize_per_seed_mean_interval_and_spread_are_over_the_kept_runs():
    t = summarize([record(*r) for r in GRID], "per_seed")["tasks"]["t"]
    # kept tests 80, 82, 84: mean 82, sd 2, 95% half-width t(0.975, 2) x 2 / sqrt(3) = 4.303 x 1.155 = 4.968
    assert t["test"] == 82.0 and t["ci95"] == pytest.approx(4.968, abs=1e-3) and t["std_over_seeds"] == 2.0
    assert t["lr_by_seed"] == {0: 1e-4, 1: 1e-5, 2: 1e-5} and t["best_lr"] == 1e-5  # kept by 2 of 3 seeds
    assert t["validation"] == pytest.approx((80 + 90 + 85) / 3, abs=1e-3) and t["lr_choice"] == "per_seed"
    assert t["test_by_seed"] == {0: 80.0, 1: 82.0, 2: 84.0}
    # mean_over_seeds on the same runs: 1e-5 for all, tests 60, 82, 84 -> 75.333
    t = summarize([record(*r) for r in GRID], "mean_over_seeds")["tasks"]["t"]
    assert t["test"] == pytest.approx(75.333, abs=1e-3) and t["lr_by_seed"] == {0: 1e-5, 1: 1e-5, 2: 1e-5}


def test_summarize_without_a_choice_follows_the_newest_record_and_old_records_mean_over_seeds():
    old = [record(*r) for r in GRID]  # records from before lr_choice existed
    assert summarize(old)["tasks"]["t"]["lr_choice"] == "mean_over_seeds"
    mixed = old[:-1] + [record(*GRID[-1], lr_choice="per_seed", finished="2026-01-01")]
    assert summarize(mixed)["tasks"]["t"]["test"] == 82.0  # per_seed, as the newest record says


def test_summarize_shows_the_standard_metric_and_counts_runs_without_it():
    # the standard metric reverses which LR wins on validation for seed 0 (1e-5: 95 vs 1e-4: 10)
    recs = [record(1e-5, 0, 70.0, 60.0, standard=(95.0, 66.0)), record(1e-4, 0, 80.0, 80.0, standard=(10.0, 11.0)),
            record(1e-5, 1, 90.0, 82.0)]  # an older record: no "standard" score
    t = summarize(recs, "per_seed", "standard")["tasks"]["t"]
    assert t["test"] == 66.0 and t["lr_by_seed"] == {0: 1e-5} and t["without_metric"] == 1
    assert t["shown"] == "standard" and t["baseline"] == 40.0
    assert summarize(recs, "per_seed")["tasks"]["t"]["test"] == 81.0  # (80 + 82) / 2 on the protocol's score


def test_a_study_aggregates_as_its_protocol_says_and_a_category_is_the_plain_mean_of_its_datasets(tmp_path):
    protocol = {"name": "t", "lrs": [1e-5, 1e-4], "seeds": [0, 1, 2], "max_steps": 4, "lr_choice": "per_seed"}
    write_json(tmp_path / "plan.json", {"study": "s", "budget": 1, "protocol": protocol, "runs": [],
                                        "evaluations": [{"label": "m", "model": "m", "step": 1, "kind": "final",
                                                         "size": "x", "tag": "tag-m"}]})
    key = records.protocol_key(protocol)
    for task, shift in (("a", 0.0), ("b", 10.0)):
        for lr, seed, val, test in GRID:
            records.write(records.record_path(tmp_path / "evals", "tag-m", key, task, "0" * 16, lr, seed),
                          {**record(lr, seed, val, test + shift, task=task), "tag": "tag-m", "fingerprint": "0" * 16,
                           "protocol": protocol})
    res = StudyResults(tmp_path)
    assert res.lr_choice == "per_seed" and res.tasks["m"]["a"].test == 82.0 and res.tasks["m"]["b"].test == 92.0
    assert res.categories["m"]["SC"].mean == 87.0  # (82 + 92) / 2
    assert StudyResults(tmp_path, lr_choice="mean_over_seeds").categories["m"]["SC"].mean == pytest.approx(80.333,
                                                                                                      abs=1e-3)
    unscored = StudyResults(tmp_path, "standard").tasks["m"]["a"]  # these records hold no standard score
    assert unscored.test is None and unscored.without_metric == 6
    with pytest.raises(EncoderlabError, match="metric 'f1' is not one of score, standard"):
        StudyResults(tmp_path, "f1")
