"""A study's records as numbers: per-dataset and per-category scores with CIs, stability, and the five findings.

A dataset's score is the mean over seeds of each seed's kept run (finetuning/aggregate.py `choose_runs`, as the
protocol's `lr_choice` says), on the protocol's metric ("score") or the field's standard one ("standard"). A category
score is the plain mean of its datasets' scores; its interval, and that of two models' difference, treat the datasets
as independent estimates (study/intervals.py).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from scipy import stats

from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import records
from encoderlab.finetuning.aggregate import summarize
from encoderlab.runs.encoders import encoder_digest
from encoderlab.runs.logging import read_metrics
from encoderlab.study import migrate_plan
from encoderlab.study.intervals import CategoryScore, category_score
from encoderlab.tasks import baselines, registry


METRICS = ("score", "standard")


@dataclass
class TaskScore:
    task: str
    category: str
    metric: str
    best_lr: float | None  # per_seed: the LR most seeds kept (lr_by_seed has each seed's)
    test: float | None
    ci95: float | None
    validation: float | None
    baseline: float | None
    by_seed: dict[int, float]  # each seed's kept test score
    centred_runs: list[float]  # every ok run's test score minus this task's mean over runs (stability)
    std_seeds: float | None
    std_lrs: float | None
    runs: int
    failed: int
    lr_by_seed: dict[int, float]
    without_metric: int = 0  # ok runs whose records lack the metric shown (older than the "standard" score)
    summary: dict | None = None  # the sweep's summary entry: its baselines, strongest baseline and warnings

    @property
    def constant(self) -> str | None:
        """What every kept run predicted on test, when each predicted one thing (a model that learned nothing)."""
        return (self.summary or {}).get("constant")

    @property
    def mostly_constant(self) -> str | None:
        """'no answer in 2 of 3 kept runs' where more than half of the kept runs predicted one thing on test."""
        return baselines.mostly_constant(self.summary or {})


def task_scores(recs: list[dict], lr_choice: str | None = None, metric: str = "score") -> TaskScore:
    """One task's records, aggregated by the sweep's own rule (`summarize`: the kept run per seed, `lr_choice`)."""
    [(name, e)] = summarize(recs, lr_choice, metric)["tasks"].items()
    cat = registry.family(e["family"]).category
    runs = e.get("test_all_runs", [])
    centre = sum(runs) / len(runs) if runs else 0.0
    shown = e["metric"] if metric == "score" else registry.family(e["family"]).standard_metric
    return TaskScore(name, cat, shown, e.get("best_lr"), e.get("test"), e.get("ci95"), e.get("validation"),
                     e["baseline"], e.get("test_by_seed", {}), [t - centre for t in runs],
                     e["std_over_seeds"] if e.get("seeds", 0) > 1 else None,
                     e["std_over_lrs"] if len(e.get("validation_by_lr", {})) > 1 else None, e["runs"], e["failed"],
                     e.get("lr_by_seed", {}), e.get("without_metric", 0), e)


# A score within this share of the headroom above the trivial baseline (100 - baseline), or within its own 95%
# interval of the baseline, is "at the baseline level": 3.3 NDCG@10 against a random ranking's 0.45 is no more a
# learned retrieval model than 0.8 is, so a comparison of two such scores measures noise, not a model.
NEAR_BASELINE = 0.05


def at_baseline(score: CategoryScore) -> bool:
    if score.baseline is None:
        return False
    return score.mean - score.baseline <= max(score.ci95 or 0.0, NEAR_BASELINE * (100 - score.baseline))


def category_scores(tasks: dict[str, TaskScore]) -> dict[str, CategoryScore]:
    """Per category, the score of its datasets that have a kept run (study/intervals.py `category_score`)."""
    out = {}
    for cat in registry.categories():
        members = [t for t in tasks.values() if t.category == cat and t.by_seed]
        if members:
            out[cat] = category_score(members)
    return out


class StudyResults:
    """Everything the report shows, read from a study folder (plan.json, evals/, pretrain/*/metrics.jsonl)."""

    def __init__(self, root: Path, metric: str = "score", lr_choice: str | None = None) -> None:
        """`metric`: "score" (the protocol's) or "standard" (the field's); `lr_choice`: None for the protocol's."""
        self.root = Path(root)
        self.plan = migrate_plan.read(self.root)
        if metric not in METRICS:
            raise EncoderlabError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
        self.metric = metric
        self.lr_choice = lr_choice or self.plan["protocol"]["lr_choice"]  # as the study's protocol says
        self.protocol_key = records.protocol_key(self.plan["protocol"])
        # the key holds every grid's runs of the protocol's settings: the study counts its own LRs and seeds
        self.grid = (self.plan["protocol"]["lrs"], self.plan["protocol"]["seeds"])
        self.evaluations = {e["label"]: e for e in self.plan["evaluations"]}
        self.runs = {r["name"]: r for r in self.plan["runs"]}
        self.tasks: dict[str, dict[str, TaskScore]] = {}
        self.unused: list[str] = []  # record files not counted, and why (listed by the report, never averaged in)
        self.not_planned: list[str] = []  # LABEL / TASK of records of a task the evaluation no longer has
        self.other_data: list[str] = []  # LABEL / TASK of records of other data than the task's files hold now
        self.no_records: list[str] = []  # LABEL / TASK of planned tasks without a record (a model with some)
        self._known: dict[tuple, dict | None] = {}
        planned_in = (self.plan.get("summary") or {}).get("folder")  # where the study was when plan.json was written
        for label, e in self.evaluations.items():
            weights = _weights(_moved_with(e.get("checkpoint"), planned_in, self.root))
            found, unused = records.scan(self.root / "evals", e["tag"], self.protocol_key, weights, grid=self.grid)
            self.unused += unused
            if (planned := self._planned(e.get("tasks"))) is None:  # the study's tasks cannot be told here
                recs = records.current(found)
            else:  # of the tasks and data the study has now
                self.not_planned += sorted({f"{label} / {r['task']}" for r in found if r["task"] not in planned})
                ours = [r for r in found if r["task"] in planned]
                recs = records.current(ours, planned)  # the records of the data there now, whenever they were made
                missing = {r["task"] for r in ours} - {r["task"] for r in recs}  # only records of other data
                self.other_data += [f"{label} / {t}" for t in sorted(missing)]
            by_task: dict[str, list[dict]] = {}
            for r in recs:
                by_task.setdefault(r["task"], []).append(r)
            self.tasks[label] = {t: task_scores(rs, self.lr_choice, metric) for t, rs in sorted(by_task.items())}
            if planned is not None and by_task:  # its category means stand on fewer datasets than planned: say so
                self.no_records += [f"{label} / {t}" for t in planned if t not in by_task and
                                    f"{label} / {t}" not in self.other_data]
        self.categories = {label: category_scores(ts) for label, ts in self.tasks.items()}
        self.unfinished = unfinished_jobs(self.root / "status")

    def _planned(self, specs: list[str] | None) -> dict[str, str | None] | None:
        key = tuple(specs) if specs is not None else None
        if key not in self._known:
            self._known[key] = planned_tasks(specs)
        return self._known[key]

    def versus(self, a: str, b: str) -> list[Comparison]:
        """a - b per category, on the datasets both were evaluated on (a baseline may have run fewer tasks)."""
        common = set(self.tasks.get(a, {})) & set(self.tasks.get(b, {}))
        ca, cb = (self.categories_of(lb, common) for lb in (a, b))
        return [_measurable(compare(ca[c], cb[c], c), ca[c], cb[c]) for c in registry.categories()
                if c in ca and c in cb]

    def categories_of(self, label: str, tasks: set[str]) -> dict[str, CategoryScore]:
        """A model's category scores on some of its datasets (those another model was evaluated on too)."""
        return category_scores({t: s for t, s in self.tasks.get(label, {}).items() if t in tasks})

    def start_step(self, run: str) -> int:
        """The global step at which a run's own step 0 stands. CPT continues a finished model, so it starts where
        its source ended; a branch's metrics already count from its trunk's step 0."""
        init = self.runs[run].get("init")
        return self.runs[init]["steps"] + self.start_step(init) if init else 0

    def task_names(self) -> list[str]:
        names = {t for ts in self.tasks.values() for t in ts}
        order = {c: i for i, c in enumerate(registry.categories())}
        cat_of = {t: s.category for ts in self.tasks.values() for t, s in ts.items()}
        return sorted(names, key=lambda t: (order.get(cat_of[t], 9), t))

    def losses(self, run: str) -> list[dict]:
        return read_metrics(self.root / "pretrain" / run / "metrics.jsonl")


def planned_tasks(specs: list[str] | None) -> dict[str, str | None] | None:
    """{name: fingerprint} of the tasks an evaluation's plan gives, the names its records are filed under (a task
    dropped from the study file since keeps its records on disk, never its place in the report) and the data they
    must be of (None where it cannot be told here: an offline task not prepared on this machine); None where the
    names cannot all be told (a plan without its task list, a task file since moved, no offline suite prepared)."""
    from encoderlab.tasks import offline_task_names, split_spec, task_identity

    offline = offline_task_names() if specs and "offline" in specs else []
    if specs is None or ("offline" in specs and not offline):
        return None
    found: dict[str, str | None] = {}
    for spec in [*offline, *(s for s in specs if s != "offline")]:
        try:
            name, fingerprint = task_identity(spec)
        except EncoderlabError:
            if split_spec(spec)[0].endswith((".yaml", ".yml")):
                return None  # a task file gone: its name is not known here
            name, fingerprint = split_spec(spec)[0], None
        except OSError:
            return None
        found[name] = fingerprint
    return found


def _moved_with(checkpoint: str | None, planned_in: str | None, root: Path) -> str | None:
    """Where an evaluation's checkpoint is now: one inside the study folder (a pretrained or random-init model, an
    import: the study's own copy) moved with it, under the folder `root` is now; plan.json names it under the folder
    the study was planned in (`planned_in`). A checkpoint outside the study (`checkpoints:`) stays where it is named.
    Read at its old place, a moved study's records would be checked against whatever model is there now."""
    if checkpoint is None or not planned_in:
        return checkpoint
    try:
        inside = Path(checkpoint).relative_to(planned_in)
    except ValueError:
        return checkpoint
    return str(root.absolute() / inside)


def _weights(checkpoint: str | None) -> str | None:
    """The SHA-256 of the weights a checkpoint holds now (its records must be of them), None when it is gone."""
    if checkpoint is None:
        return None
    try:
        return encoder_digest(Path(checkpoint))
    except (OSError, EncoderlabError):
        return None


# ------------------------------------------------------------------------------------------------ comparisons


@dataclass
class Comparison:
    category: str
    a: float
    b: float
    diff: float  # a - b
    ci95: float | None  # half-width of the difference's interval (Welch)
    p: float | None
    mde: float | None = None  # the smallest |a - b| this test finds 80% of the time at alpha 0.05
    measurable: bool = True  # False: both sides at their trivial baseline's level (`at_baseline`)
    undefined: str | None = None  # why no interval, p or mde exists where seeds were enough: no variance at all
    # each side's category score minus the mean of its datasets' strongest baselines, and which baselines they are
    lexical: tuple[float, float] | None = None
    lexical_names: str = ""

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < 0.05


def compare(a: CategoryScore, b: CategoryScore, category: str) -> Comparison:
    """A - B with the variance of independent estimates (study/intervals.py): both sides' dataset terms summed,
    Welch-Satterthwaite's df; where a dataset has one seed no interval or p-value exists (no claim)."""
    diff, spread = a.mean - b.mean, a.spread + b.spread
    if not spread.defined:
        return Comparison(category, a.mean, b.mean, diff, None, None)
    se = math.sqrt(spread.variance)
    # Every seed the same on both sides: no interval, p or power exists (not "± 0.00, p 1.000"). Up to rounding: means
    # of constant scores differ in their last bits (a standard error of 5e-15 on scores near 14).
    if spread.df is None or se <= 1e-9 * max(1.0, abs(a.mean), abs(b.mean)):
        return Comparison(category, a.mean, b.mean, diff, None, None, undefined=no_variance(a, b))
    df = spread.df
    p = float(2 * stats.t.sf(abs(diff / se), df))
    mde = float((stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se)
    return Comparison(category, a.mean, b.mean, diff, float(stats.t.ppf(0.975, df) * se), p, mde)


def _measurable(c: Comparison, a: CategoryScore, b: CategoryScore) -> Comparison:
    """Whether the pair is measurable (`at_baseline`), and where both stand against their strongest baselines."""
    lexical = None if a.lexical is None or b.lexical is None else (a.mean - a.lexical, b.mean - b.lexical)
    return replace(c, measurable=not (at_baseline(a) and at_baseline(b)), lexical=lexical,
                   lexical_names=a.lexical_names)


def no_variance(a: CategoryScore, b: CategoryScore) -> str:
    """Why a comparison has no statistics: its scores do not vary over seeds, and which tasks predict a constant."""
    constant = a.constant + [c for c in b.constant if c not in a.constant]
    why = f"the predictions are constant ({'; '.join(constant)})" if constant else "each side scored the same on " \
        "every seed"
    return f"undefined: no variance over seeds, {why}"


REPRODUCED, OPPOSITE, INCONCLUSIVE = "reproduced", "opposite", "inconclusive at this scale"
# the words of `at_baseline`'s rule: a score 8.8 above the baseline may be within its interval of it
NOT_MEASURABLE = "not measurable (each within its interval, or 5% of the headroom, of the trivial baseline)"


def outcome(c: Comparison, expect_positive: bool = True) -> str:
    """One comparison against the paper's direction: its 95% interval lies on the paper's side of zero, on the
    other side, or contains zero (also when too few seeds give no interval); not measurable when both models
    are at their trivial baseline's level (no verdict on noise)."""
    if not c.measurable:
        return NOT_MEASURABLE
    if c.ci95 is None or abs(c.diff) <= c.ci95:
        return INCONCLUSIVE
    return REPRODUCED if (c.diff > 0) == expect_positive else OPPOSITE


def overall(outcomes: list[str]) -> str:
    """A finding from its comparisons: reproduced when more than half of them reproduce it and none is opposite;
    opposite in the mirror case; otherwise (mostly intervals containing zero, or both directions) inconclusive."""
    outcomes = [o for o in outcomes if o != NOT_MEASURABLE]  # they count for neither direction
    if not outcomes:
        return NOT_MEASURABLE
    n, up, down = len(outcomes), outcomes.count(REPRODUCED), outcomes.count(OPPOSITE)
    if up * 2 > n and not down:
        return REPRODUCED
    if down * 2 > n and not up:
        return OPPOSITE
    return INCONCLUSIVE


def verdict(comparisons: list[Comparison], expect_positive: bool = True, unit: str = "categories") -> str:
    """How a finding fares (`overall` of the per-comparison outcomes), with the count of each outcome."""
    if not comparisons:
        return "not measured (missing evaluations)"
    outs = [outcome(c, expect_positive) for c in comparisons]
    text = tally(outs, unit)
    mdes = [c.mde for c, o in zip(comparisons, outs) if o == INCONCLUSIVE and c.mde is not None]
    if mdes:
        span = f"{min(mdes):.2f}" + (f" to {max(mdes):.2f}" if max(mdes) > min(mdes) else "")
        text += (f"; where the interval includes zero, this run could have detected differences of {span} points "
                 "(80% power, alpha 0.05)")
    return (text + "".join(f"; {c.category}: {c.undefined}" for c in comparisons if c.undefined)
            + lexical_note(comparisons))


def lexical_note(comparisons: list[Comparison]) -> str:
    """'; against the strongest baseline (BM25) in IR: no model beats it', for each category where neither side's
    score is above the mean of its datasets' strongest baselines."""
    return "".join(f"; against the strongest baseline ({c.lexical_names}) in {c.category}: no model beats it"
                   for c in comparisons if c.lexical is not None and max(c.lexical) <= 0)


def tally(outcomes: list[str], unit: str) -> str:
    """'**reproduced** (reproduced in 3, inconclusive at this scale in 1 of 4 categories)'."""
    counts = ", ".join(f"{o} in {outcomes.count(o)}" for o in (REPRODUCED, OPPOSITE, INCONCLUSIVE, NOT_MEASURABLE)
                       if o in outcomes)
    return f"**{overall(outcomes)}** ({counts} of {len(outcomes)} {unit})"


def unfinished_jobs(folder: Path) -> list[dict]:
    """The jobs the last `study run` left failed or skipped ({job, status, reason}: study/runner.py writes one file a
    job, removed once the job succeeds); a file that does not read as one is named as such, never dropped."""
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            job = json.loads(path.read_text())
            out.append({"job": str(job["job"]), "status": str(job["status"]), "reason": str(job["reason"])})
        except (OSError, ValueError, KeyError, TypeError):
            out.append({"job": path.stem.replace("__", ":"), "status": "unknown", "reason": f"{path} is unreadable"})
    return out
