"""Pairwise comparisons of a study's models, in no one's expected direction: every pair of its existing checkpoints
(`checkpoints:`), and of its final models when it asks none of the paper's findings. Counted over the categories
each pair was run on, so three categories run say "of 3 categories", never "of 4"."""
from __future__ import annotations

from itertools import combinations

from encoderlab.study.results import NOT_MEASURABLE, Comparison, lexical_note, outcome

A_HIGHER, B_HIGHER, NO_DIFFERENCE = "A higher", "B higher", "no difference shown (the interval includes zero)"


def cmp_rows(comps: list[Comparison], label=outcome) -> str:
    """A comparison table, one category a row; `label` says each row's outcome, the last column where both sides
    stand against their datasets' strongest baselines."""
    rows = [f"| {c.category} | {c.a:.2f} | {c.b:.2f} | {c.diff:+.2f} | {c.undefined} | - | - | {label(c)} | "
            f"{_lexical(c)} |"
            if c.undefined else
            f"| {c.category} | {c.a:.2f} | {c.b:.2f} | {c.diff:+.2f} | "
            f"{'-' if c.ci95 is None else f'± {c.ci95:.2f}'} | {'-' if c.p is None else f'{c.p:.3f}'} | "
            f"{'-' if c.mde is None else f'{c.mde:.2f}'} | {label(c)} | {_lexical(c)} |" for c in comps]
    return ("| category | A | B | A - B | 95% CI of A - B | p (Welch) | detectable (80% power) | outcome | "
            "A, B vs strongest baseline |\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def _lexical(c: Comparison) -> str:
    """'-67.30, -70.10 vs BM25 (no model beats it)': each side's score minus its datasets' strongest baselines."""
    if c.lexical is None:
        return "-"
    none = " (no model beats it)" if max(c.lexical) <= 0 else ""
    return f"{c.lexical[0]:+.2f}, {c.lexical[1]:+.2f} vs {c.lexical_names}{none}"


def difference(c: Comparison) -> str:
    """A pair's outcome in one category: which side's 95% interval of A - B it lies on, if any."""
    if not c.measurable:
        return NOT_MEASURABLE
    if c.ci95 is None or abs(c.diff) <= c.ci95:
        return NO_DIFFERENCE
    return A_HIGHER if c.diff > 0 else B_HIGHER


def summary(comps: list[Comparison]) -> str:
    """'A higher in 2, no difference shown (...) in 1 of 3 categories'."""
    outs = [difference(c) for c in comps]
    counts = ", ".join(f"{o} in {outs.count(o)}" for o in (A_HIGHER, B_HIGHER, NO_DIFFERENCE, NOT_MEASURABLE)
                       if o in outs)
    return f"{counts} of {len(outs)} {'category' if len(outs) == 1 else 'categories'}{lexical_note(comps)}"


def compared_models(res, paper_findings: bool) -> list[str]:
    """The labels compared pairwise: the existing checkpoints; with no paper finding asked, the final and imported
    models too (the study's own question is then which of its models is better)."""
    kinds = ("checkpoint",) if paper_findings else ("checkpoint", "final", "imported")
    return [lb for lb, e in res.evaluations.items() if e["kind"] in kinds]


def comparisons_section(report, paper_findings: bool) -> str:
    res = report.res
    labels = compared_models(res, paper_findings)
    if len(labels) < 2:
        return ""
    parts = ["## Pairwise comparisons\n",
             "Each pair of models, A minus B per category (mean over the category's datasets), Welch's t-test "
             "with datasets and models as independent estimates (docs/evaluation.md, Intervals), on the datasets "
             "both were evaluated on. A side is *higher* when the "
             "95% interval of A - B lies wholly on its side of zero; a category where both models are within 5% of "
             "the headroom above the trivial baseline (or within their interval of it) is *not measurable*: no "
             "verdict on noise.\n"]
    for a, b in combinations(labels, 2):
        comps = res.versus(a, b)
        text = summary(comps) if comps else "not measured (missing evaluations)"
        parts.append(f"**A = {a}, B = {b}**: {text}.\n\n{cmp_rows(comps, difference) if comps else ''}\n")
    return "\n".join(parts)
