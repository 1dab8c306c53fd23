"""The report's sanity check, "pretraining beats random initialisation", and its one stated rule per cell."""
from __future__ import annotations

import math

from encoderlab.study.results import Comparison
from encoderlab.study.tables import _csv, _table
from encoderlab.tasks import registry

YES, NO, AT_BASELINE = "yes", "no", "at baseline"
RULE = ("**Rule, per cell**: **yes** when the whole 95% interval of the difference lies above zero; *no* when it "
        "includes zero or lies below it, or when no interval exists (one seed, or no variance); *at baseline* when "
        "both models are at the trivial baseline's level (each within 5% of the headroom above its datasets' mean "
        "trivial baseline, or within its own interval of it): no verdict on such scores, whatever the interval, "
        "and the cell never counts as holding.")


def sanity_outcome(c: Comparison) -> str:
    """A cell's word under `RULE`: the one place that decides it (the table, the counts and sanity.csv)."""
    if not c.measurable:
        return AT_BASELINE
    return YES if c.ci95 is not None and c.diff - c.ci95 > 0 else NO


def sanity_section(report) -> str:
    """Every pretrained final model against the random-init baseline of its size, per category."""
    res = report.res
    randoms = {e["size"]: lb for lb, e in res.evaluations.items() if e["kind"] == "random"}
    pairs = {lb: randoms[e["size"]] for lb, e in res.evaluations.items()
             if e["kind"] == "final" and e["size"] in randoms}
    comps = {lb: res.versus(lb, base) for lb, base in pairs.items()}
    if not any(comps.values()):
        return ""
    rows, csv_rows, passing = [], [], 0
    for lb, cs in comps.items():
        by_cat = {c.category: c for c in cs}
        outs = [sanity_outcome(c) for c in cs]
        holds = outs.count(YES)
        passing += bool(cs) and holds >= _most(len(cs))
        at_base = f", at baseline in {outs.count(AT_BASELINE)}" if AT_BASELINE in outs else ""
        rows.append([lb] + [_holds_cell(by_cat[cat]) if cat in by_cat else "-" for cat in registry.categories()]
                    + [f"holds in {holds}/{len(cs)} categories{at_base}" if cs else
                       "not measured (missing evaluations)"])
        csv_rows += [[lb, pairs[lb], c.category, round(c.diff, 3), c.ci95, c.p, sanity_outcome(c),
                      sanity_outcome(c) == YES] for c in cs]
    _csv(report.out / "sanity.csv", ["model", "random_init", "category", "difference", "ci95", "p", "outcome",
                                     "holds"], csv_rows)
    return ("## Sanity check: pretraining beats random initialisation\n\n"
            f"Every pretrained final model minus the random-init model of its size "
            f"({', '.join(sorted(set(pairs.values())))}): "
            "category score difference ± 95% CI half-width (Welch, datasets and models as independent estimates: "
            "docs/evaluation.md, Intervals), p-value. It **holds** in a category when the cell says yes; the sign "
            "shows the direction either way. Only the datasets both models were evaluated on count (the "
            f"random-init model runs `evaluation.random_init_tasks`).\n\n{RULE}\n\n"
            f"**It holds in {_threshold([len(cs) for cs in comps.values()])} for {passing} of "
            f"{sum(map(bool, comps.values()))} pretrained final models{_unmeasured(comps)}.**\n\n"
            + _table(["model"] + registry.categories() + ["verdict"], rows)
            + "\n\nCSV: `sanity.csv` (`outcome`: the cell's word)\n")


def _most(n: int) -> int:
    """The paper's "3 of 4 categories", for the n categories a model was compared on: three quarters, rounded up."""
    return math.ceil(3 * n / 4)


def _unmeasured(comps: dict) -> str:
    missing = sum(not cs for cs in comps.values())
    return f" ({missing} more not measured: missing evaluations)" if missing else ""


def _threshold(compared: list[int]) -> str:
    """'at least 3 of the 3 categories compared', or per model when models were compared on different numbers."""
    ns = sorted(set(n for n in compared if n))
    if len(ns) == 1:
        return f"at least {_most(ns[0])} of the {ns[0]} categories compared"
    return "at least three quarters of the categories each was compared on (" + ", ".join(
        f"{_most(n)} of {n}" for n in ns) + ")"


def _holds_cell(c: Comparison) -> str:
    """'**yes**: +2.60 ± 0.47 (p 0.000)', 'at baseline: ...', 'no: ...': the word by `sanity_outcome`."""
    word = sanity_outcome(c)
    word = f"**{word}**" if word == YES else word
    if c.undefined:
        return f"{word}: {c.diff:+.2f}, {c.undefined}"
    ci = "-" if c.ci95 is None else f"{c.ci95:.2f}"
    p = "-" if c.p is None else f"{c.p:.3f}"
    return f"{word}: {c.diff:+.2f} ± {ci} (p {p})"
