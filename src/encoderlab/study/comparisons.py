"""The comparisons a study file declares (`comparisons:`), one report section each, and the named set of them it
turns on (`findings:`). A model is named by its evaluation label or as RUN@STEP; the planner refuses a name the
study does not evaluate (`check_comparisons`), so the report finds every one."""
from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from encoderlab.core.config import ConfigError
from encoderlab.study.compare import PAIR_RULE, cmp_rows, difference, spread_tests, summary
from encoderlab.study.spec import ComparisonSpec

STEADIER, SAME_SPREAD = "{} steadier", "no difference shown (p >= 0.05, or undefined)"
SPREAD_RULE = ("Spread = the std of every LR x seed run's score, each centred on its dataset's mean, pooled per "
               "category; Levene's test per category on the datasets each model ran. **Rule, per category**: a side "
               "is *steadier* when its spread is smaller with p < 0.05; otherwise no difference is shown. "
               "'detectable' is the spread ratio an F-test would find 80% of the time at alpha 0.05.")
EVALUATED = ("final", "intermediate")  # the kinds of evaluation that are a run's checkpoints


def declared(plan: dict) -> list[ComparisonSpec]:
    """The comparisons a study's plan (read through study/migrate_plan.py) declares."""
    return [ComparisonSpec.model_validate(c) for c in plan["spec"]["comparisons"] or []]


def findings_set(plan: dict) -> str | None:
    """The named set of comparisons the study turns on (`findings:`), if any."""
    return plan["spec"]["findings"]


def label_of(ref: str, evaluations: dict[str, dict]) -> str | None:
    """An evaluation label named as itself or as RUN@STEP (that run's checkpoint at that step); None if none is."""
    if ref in evaluations:
        return ref
    run, _, step = ref.rpartition("@")
    return next((lb for lb, e in evaluations.items() if run and e["model"] == run and str(e["step"]) == step
                 and e["kind"] in EVALUATED), None)


def checkpoints_of(run: str, evaluations: dict[str, dict]) -> list[tuple[int, str]]:
    """A run's evaluated checkpoints as (step, label), by step."""
    return sorted((e["step"], lb) for lb, e in evaluations.items() if e["model"] == run and e["kind"] in EVALUATED)


def base_of(run: str, runs: dict[str, dict], evaluations: dict[str, dict]) -> str | None:
    """The evaluation of the model a continued-pretraining run started from: a run's final model, or an import."""
    r = runs.get(run) or {}
    if r.get("kind") != "cpt":
        return None
    if r.get("init"):
        return r["init"] if r["init"] in evaluations else None
    return next((lb for lb, e in evaluations.items() if e["kind"] == "imported" and e["size"] == r.get("imported")),
                None)


def check_comparisons(plan) -> None:
    """Every model a study file's comparisons name is one the plan evaluates (a Plan: its spec, runs, evaluations)."""
    evaluations = {e.label: {"model": e.model, "step": e.step, "kind": e.kind, "size": e.size}
                   for e in plan.evaluations}
    runs = {name: {"kind": r.kind, "init": r.init, "imported": r.imported} for name, r in plan.runs.items()}
    for i, c in enumerate(plan.spec.comparisons):
        where = f"study {plan.spec.name}: comparisons.{i}.{c.kind}"
        if c.kind == "efficiency":
            allowed = sorted({e["model"] for e in evaluations.values() if e["kind"] in EVALUATED})
            wrong = [m for m in c.models if m not in allowed]
            what = "no run with evaluated checkpoints"
        elif c.kind == "cpt":
            allowed = sorted(n for n in runs if base_of(n, runs, evaluations))
            wrong = [m for m in c.models if m not in allowed]
            what = "no continued-pretraining run (`cpt:`) of this study"
        else:
            allowed = sorted(evaluations)
            wrong = [m for m in c.models if label_of(m, evaluations) is None]
            what = "no evaluated model (an evaluation label, or RUN@STEP at an evaluated step)"
            if not wrong and len({label_of(m, evaluations) for m in c.models}) < len(c.models):
                raise ConfigError(f"{where}: {' and '.join(map(repr, c.models))} name the same model, compared "
                                  "with itself; name two different models")
        if wrong:
            shown = ", ".join(allowed[:8]) + (", ..." if len(allowed) > 8 else "")
            raise ConfigError(f"{where}: {', '.join(map(repr, wrong))} names {what} (allowed: {shown or 'none'})")


def declared_sections(report) -> str:
    """One section per declared comparison, in the study file's order."""
    specs = declared(report.res.plan)
    if not specs:
        return ""
    write = {"versus": _versus, "stability": _stability, "efficiency": _efficiency, "cpt": _cpt}
    return "## The study's comparisons\n\n" + "\n".join(write[c.kind](report, c, i + 1) for i, c in enumerate(specs))


def _pair_text(res, a: str | None, b: str | None) -> tuple[str, str]:
    """'A = X, B = Y': its verdict words and table, or why there are none."""
    comps = res.versus(a, b) if a and b else []
    text = summary(comps) if comps else "not measured (missing evaluations)"
    return f"**A = {a}, B = {b}**: {text}.", cmp_rows(comps, difference) if comps else ""


def _versus(report, c: ComparisonSpec, number: int) -> str:
    a, b = (label_of(m, report.res.evaluations) or m for m in c.models)
    line, table = _pair_text(report.res, a, b)
    return f"### {number}. {c.title or f'{a} vs {b}'}\n\n{PAIR_RULE}\n\n{line}\n\n{table}\n"


def _cpt(report, c: ComparisonSpec, number: int) -> str:
    res = report.res
    base = base_of(c.cpt, res.runs, res.evaluations)
    line, table = _pair_text(res, c.cpt, base)
    title = c.title or f"Continued pretraining: {c.cpt} vs {base}, the model it started from"
    return (f"### {number}. {title}\n\nA = the continued model, B = its starting point. {PAIR_RULE}\n\n{line}\n\n"
            f"{table}\n")


def _stability(report, c: ComparisonSpec, number: int) -> str:
    a, b = (label_of(m, report.res.evaluations) or m for m in c.models)
    tests = spread_tests(report.res, a, b)
    words = [SAME_SPREAD if not t.significant else STEADIER.format("A" if t.sd_a < t.sd_b else "B") for t in tests]
    counts = ", ".join(f"{w} in {words.count(w)}" for w in dict.fromkeys(words))
    unit = "category" if len(words) == 1 else "categories"
    text = f"{counts} of {len(words)} {unit}" if words else "not measured (missing evaluations, or fewer than 3 " \
        "runs a category)"
    table = ("| category | spread A | spread B | p (Levene) | detectable spread ratio (80% power) | outcome |\n"
             "|---|---|---|---|---|---|\n" + "\n".join(t.row(w) for t, w in zip(tests, words)) if tests else "")
    return (f"### {number}. {c.title or f'Fine-tuning stability: {a} vs {b}'}\n\n{SPREAD_RULE}\n\n"
            f"**A = {a}, B = {b}**: {text}.\n\n{table}\n")


def _efficiency(report, c: ComparisonSpec, number: int) -> str:
    """Every checkpoint's category scores, then each pair of runs at the steps both were evaluated at."""
    res = report.res
    points = {run: checkpoints_of(run, res.evaluations) for run in c.models}
    step = {lb: s for pts in points.values() for s, lb in pts}
    title = c.title or f"Data efficiency: {', '.join(c.models)}"
    parts = [report.category_table(list(step), f"efficiency-{number}", f"{number}. {title}",
                                   lambda lb: f"{lb} (step {step[lb]:,})")]
    for a, b in combinations(c.models, 2):
        at = dict(points[b])
        comps = [replace(x, category=f"{x.category} at {s:,}") for s, lb in points[a] if s in at
                 for x in res.versus(lb, at[s])]
        text = summary(comps, "step x category comparisons") if comps else \
            "not measured (no step at which both were evaluated)"
        parts.append(f"Each step both were evaluated at: {PAIR_RULE}\n\n**A = {a}, B = {b}**: {text}.\n\n"
                     f"{cmp_rows(comps, difference) if comps else ''}\n")
    return "\n".join(parts)
