"""How a task's score is read off its LR x seed grid of records: the LR choice (`lr_choice`), the mean over seeds,
its 95% interval, the spreads and the baselines; one place for sweep summaries, study reports and the authors' own
results (study/reference.py)."""
from __future__ import annotations

import math

from encoderlab.core.errors import EncoderlabError, Failed
from encoderlab.tasks import baselines
from encoderlab.tasks.metrics import mean_ci95, std

LR_CHOICES = ("mean_over_seeds", "per_seed")
COVERAGE = ("max_length", "truncated", "truncation_totals", "answers_lost")  # what the inputs lost at max_length


def choose_runs(runs: list[tuple[float, int, float, float]], lr_choice: str) -> dict[int, tuple[float, float, float]]:
    """(lr, seed, validation, test) runs -> seed -> its kept run's (lr, validation, test), as `lr_choice` says:
    mean_over_seeds keeps every seed's run at the one LR whose mean validation score over its seeds is best;
    per_seed keeps, for each seed, its run with the best validation score. Equal validation scores: the smallest LR
    (the authors' published code does not include their aggregation, so it does not say; the smallest LR is the
    more conservative step and was encoderlab's rule already). The one place that chooses: sweep summaries, study
    reports and the authors' own results (study/reference.py) all go through it."""
    if lr_choice not in LR_CHOICES:
        raise EncoderlabError(f"lr_choice {lr_choice!r} is not one of {', '.join(LR_CHOICES)}")
    if lr_choice == "mean_over_seeds":
        by_lr: dict[float, list[float]] = {}
        for lr, _, val, _ in runs:
            by_lr.setdefault(lr, []).append(val)
        # Only LRs with a run on every seed compete (when there are any): a mean over fewer seeds is noisier, and the
        # best of noisy means is biased upwards (a lone lucky seed would win). `incomplete_lrs` names the others.
        short = incomplete_lrs(runs)
        mean = {lr: sum(v) / len(v) for lr, v in by_lr.items() if lr not in short} or \
            {lr: sum(v) / len(v) for lr, v in by_lr.items()}
        best = max(sorted(mean), key=lambda lr: mean[lr])  # max keeps the first of equals: the smallest LR
        return {seed: (lr, val, test) for lr, seed, val, test in sorted(runs, key=lambda r: r[1]) if lr == best}
    kept: dict[int, tuple[float, float, float]] = {}
    for lr, seed, val, test in sorted(runs, key=lambda r: (r[1], r[0])):  # ascending LR: the smallest stays on ties
        if seed not in kept or val > kept[seed][1]:
            kept[seed] = (lr, val, test)
    return kept


def incomplete_lrs(runs: list[tuple[float, int, float, float]]) -> dict[float, int]:
    """LR -> its number of seeds, for each LR with a run on fewer seeds than the grid's: under mean_over_seeds such an
    LR does not compete while any LR has every seed (with none complete, every LR competes on what it has)."""
    seeds = len({seed for _, seed, _, _ in runs})
    have: dict[float, set[int]] = {}
    for lr, seed, _, _ in runs:
        have.setdefault(lr, set()).add(seed)
    return {lr: len(s) for lr, s in sorted(have.items()) if len(s) < seeds}


def lr_choice_of(recs: list[dict]) -> str:
    """The `lr_choice` the newest record was made with (records from before the setting: mean_over_seeds)."""
    newest = max(recs, key=lambda r: r.get("finished", ""))
    return newest.get("protocol", {}).get("lr_choice", "mean_over_seeds")


def summarize(recs: list[dict], lr_choice: str | None = None, metric: str = "score") -> dict:
    """Per task: its runs aggregated by `choose_runs` under `lr_choice` (None: as its newest record says), on
    `metric`: "score" (the protocol's metric) or "standard" (the field's; records from before it lack it and are
    counted in `without_metric`; those whose value of it is not a finite number, in `not_finite`)."""
    by_task: dict[str, list[dict]] = {}
    for r in recs:
        by_task.setdefault(r["task"], []).append(r)
    tasks = {}
    for name, rs in sorted(by_task.items()):
        ok = [r for r in rs if r["status"] == "ok"]
        scored, uncounted = _with_metric(ok, metric)
        choice = lr_choice or lr_choice_of(rs)
        entry = {"family": rs[0]["family"], "metric": rs[0]["metric"], "shown": metric, "lr_choice": choice,
                 "runs": len(rs), "failed": len(rs) - len(ok),
                 "baseline": rs[0].get("baseline", {}).get("test", {}).get(metric),
                 "baselines": baselines.of_records(rs, metric),
                 "baselines_recorded": any(isinstance(r.get("baselines"), dict) for r in rs),
                 "test_examples": (rs[-1].get("examples") or {}).get("test"),  # None: recorded before it was
                 "trained_on": (rs[-1].get("trained_on") or {}).get("task", name),  # another task: shared
                 "coverage": {k: rs[-1].get(k) for k in COVERAGE},  # None: recorded before the sweep kept it
                 "failures": [{"lr": r["lr"], "seed": r["seed"], "reason": r["reason"]} for r in rs if r not in ok]}
        entry.update({k: n for k, n in uncounted.items() if n})
        if scored:
            score = {(r["lr"], r["seed"]): (r["scores"]["validation"][metric], r["scores"]["test"][metric])
                     for r in scored}
            score_runs = [(lr, seed, v, t) for (lr, seed), (v, t) in score.items()]
            kept = choose_runs(score_runs, choice)
            test = [t for _, _, t in kept.values()]
            lrs = [lr for lr, _, _ in kept.values()]
            mean, half = mean_ci95(test)
            by_lr: dict[float, list[tuple[float, float]]] = {}
            for (lr, _), vt in score.items():
                by_lr.setdefault(lr, []).append(vt)
            val = {lr: sum(v for v, _ in g) / len(g) for lr, g in by_lr.items()}
            per_lr_test = [sum(t for _, t in g) / len(g) for g in by_lr.values()]
            entry.update({"best_lr": max(sorted(set(lrs)), key=lrs.count),  # per_seed: the LR most seeds kept
                          "lr_by_seed": {seed: lr for seed, (lr, _, _) in kept.items()},
                          "validation": round(sum(v for _, v, _ in kept.values()) / len(kept), 3),
                          "test": round(mean, 3), "ci95": round(half, 3) if half == half else None,
                          "seeds": len(test),
                          # per seed, its kept run (category scores average them), and every scored run (spread)
                          "test_by_seed": {seed: t for seed, (_, _, t) in kept.items()},
                          "test_all_runs": [t for _, t in score.values()],
                          "std_over_seeds": round(std(test), 3), "std_over_lrs": round(std(per_lr_test), 3),
                          "validation_by_lr": {f"{lr:g}": round(v, 3) for lr, v in sorted(val.items())}})
            if choice == "mean_over_seeds" and (short := incomplete_lrs(score_runs)):
                entry["incomplete_lrs"] = {"seeds": len({seed for _, seed, _, _ in score_runs}),  # said by reports
                                           "lrs": {f"{lr:g}": n for lr, n in short.items()},
                                           "competed": len(short) == len(val)}  # none had every seed
            by_run = {(r["lr"], r["seed"]): r for r in scored}
            kept_records = [by_run[lr, seed] for seed, (lr, _, _) in kept.items()]
            entry["constant"] = baselines.constant_of(kept_records)
            entry["constant_runs"] = constant_runs(kept_records)
        best = baselines.strongest(entry["baselines"])
        entry["strongest_baseline"] = {"name": best[0], "value": best[1]} if best else None
        entry["warning"] = baselines.warning(entry)
        tasks[name] = entry
    return {"tasks": tasks}


def constant_runs(kept: list[dict]) -> dict:
    """How many kept runs predicted one thing on test, of how many, and what: a task where most do is flagged in
    study reports even when a seed or two learned something (`constant` needs every one)."""
    seen = [c["test"] for r in kept if isinstance(c := r.get("constant_predictions"), dict)
            and isinstance(c.get("test"), str)]
    return {"runs": len(seen), "of": len(kept), "predicts": "; ".join(sorted(set(seen)))}


def check_scored(summary: dict) -> None:
    """Refuse to call a sweep a success when a task has no run that scored: every one failed (diverged, or a
    non-finite score). A failed run among others is an LR sweep's ordinary outcome; none at all is no result."""
    if none := [name for name, t in summary["tasks"].items() if t["runs"] and t["failed"] == t["runs"]]:
        first = summary["tasks"][none[0]]["failures"][0]
        raise Failed(f"no run of {', '.join(none)} scored: all {sum(summary['tasks'][n]['runs'] for n in none)} "
                     f"failed (lr {first['lr']:g} seed {first['seed']}: {first['reason']}); lower the LRs, or fix "
                     "the task")


def ci_text(t: dict) -> str:
    """A task summary's 95% CI as tables and cards print it: the half-width; "undefined (one seed)"; "undefined
    (zero variance)" where every seed scored the same. Read from the scores alone: runs that each predict a constant
    may still differ (one class in one run, another in the next), and their interval is printed, the constant
    being said by the summary's warning."""
    if t.get("seeds") == 1:
        return ONE["seeds"]
    if t.get("seeds", 0) > 1 and t.get("std_over_seeds") == 0:
        return ZERO_VARIANCE
    return "n/a" if t.get("ci95") is None else f"± {t['ci95']:.2f}"


ONE = {"seeds": "undefined (one seed)", "lrs": "undefined (one LR)"}  # one value has no spread, not a spread of 0
ZERO_VARIANCE = "undefined (zero variance)"  # every seed scored the same: no interval, not "± 0.00"


def spread_text(t: dict, over: str) -> str:
    """A task summary's standard deviation over its seeds' kept runs (`over` "seeds") or over its LRs' mean test
    scores ("lrs") as tables print it; undefined where there is one of them, as its interval is (`ci_text`)."""
    n = t.get("seeds", 0) if over == "seeds" else len(t.get("validation_by_lr") or {})
    return ONE[over] if n < 2 else f"{t[f'std_over_{over}']:.2f}"


def _with_metric(ok: list[dict], metric: str) -> tuple[list[dict], dict[str, int]]:
    """The ok runs scored in `metric` on both splits, and how many are not: `without_metric` (records older than
    the metric) and `not_finite` (its value NaN or infinite, which would make the mean, its interval and every
    verdict on it NaN; the sweep fails a run on its protocol score alone)."""
    has = [r for r in ok if all(metric in r["scores"][split] for split in ("validation", "test"))]
    scored = [r for r in has if all(finite_number(r["scores"][split][metric]) for split in ("validation", "test"))]
    return scored, {"without_metric": len(ok) - len(has), "not_finite": len(has) - len(scored)}


def finite_number(x) -> bool:
    """A JSON number that is finite: not NaN or infinite, not a boolean (JSON's true is no score of 1)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
