"""Pairwise comparisons of a study's models, in no one's expected direction: the tables, words and tests that the
declared comparisons (study/comparisons.py), the paper's findings (study/paper_findings.py) and, in a study that
declares none, the comparison of every pair of its models share. Counted over the categories each pair was run on,
so three categories run say "of 3 categories", never "of 4"."""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

from scipy import stats

from encoderlab.study.results import NOT_MEASURABLE, Comparison, lexical_note, outcome
from encoderlab.tasks import registry

A_HIGHER, B_HIGHER, NO_DIFFERENCE = "A higher", "B higher", "no difference shown (the interval includes zero)"
PAIR_RULE = ("A minus B per category (mean over the category's datasets), Welch's t-test with datasets and models as "
             "independent estimates (docs/evaluation.md, Intervals), on the datasets both were evaluated on. A side "
             "is *higher* when the 95% interval of A - B lies wholly on its side of zero; a category where both "
             "models are within 5% of the headroom above the trivial baseline (or within their interval of it) is "
             "*not measurable*: no verdict on noise.")


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


def summary(comps: list[Comparison], unit: str = "categories") -> str:
    """'A higher in 2, no difference shown (...) in 1 of 3 categories'."""
    outs = [difference(c) for c in comps]
    counts = ", ".join(f"{o} in {outs.count(o)}" for o in (A_HIGHER, B_HIGHER, NO_DIFFERENCE, NOT_MEASURABLE)
                       if o in outs)
    unit = "category" if len(outs) == 1 and unit == "categories" else unit
    return f"{counts} of {len(outs)} {unit}{lexical_note(comps)}"


def compared_models(res, findings_shown: bool) -> list[str]:
    """The labels compared pairwise: the existing checkpoints; where no named set of findings compares the study's
    models, the final and imported models too (the study's own question is then which of its models is better)."""
    kinds = ("checkpoint",) if findings_shown else ("checkpoint", "final", "imported")
    return [lb for lb, e in res.evaluations.items() if e["kind"] in kinds]


def comparisons_section(report, findings_shown: bool) -> str:
    res = report.res
    labels = compared_models(res, findings_shown)
    if len(labels) < 2:
        return ""
    parts = ["## Pairwise comparisons\n", f"Each pair of models, {PAIR_RULE}\n"]
    for a, b in combinations(labels, 2):
        comps = res.versus(a, b)
        text = summary(comps) if comps else "not measured (missing evaluations)"
        parts.append(f"**A = {a}, B = {b}**: {text}.\n\n{cmp_rows(comps, difference) if comps else ''}\n")
    return "\n".join(parts)


@dataclass(frozen=True)
class SpreadTest:
    """Two models' fine-tuning spread in one category: the std of every LR x seed run's score, centred per dataset,
    Levene's p-value on it and the spread ratio an F-test would detect 80% of the time."""

    category: str
    sd_a: float
    sd_b: float
    p: float  # nan where every run sits as far from its median as the others (no spread of spreads)
    detectable_ratio: float

    @property
    def significant(self) -> bool:
        return self.p < 0.05  # False for nan: no evidence either way

    def row(self, word: str) -> str:
        shown = f"{self.p:.3f}" if self.p == self.p else "undefined (equal deviations)"
        return (f"| {self.category} | {self.sd_a:.2f} | {self.sd_b:.2f} | {shown} | x{self.detectable_ratio:.2f} | "
                f"{word} |")


def spread_tests(res, a: str | None, b: str | None) -> list[SpreadTest]:
    """Levene's test per category where both models have at least 2 degrees of freedom of within-dataset spread
    (`res` needs only `tasks`)."""
    out = []
    for cat in registry.categories():
        groups = {name: dataset_runs(res, name, cat) for name in (a, b)}
        if not a or not b or min(_dof(groups[a]), _dof(groups[b])) < 2:
            continue
        runs = {k: deviations(v) for k, v in groups.items()}
        flat = max(runs[a]) == min(runs[a]) and max(runs[b]) == min(runs[b])
        p = 1.0 if flat else float(stats.levene(runs[a], runs[b]).pvalue)  # Levene is undefined on constants
        d1, d2 = _dof(groups[b]), _dof(groups[a])
        ratio = (stats.f.ppf(0.975, d1, d2) / stats.f.ppf(0.2, d1, d2)) ** 0.5
        out.append(SpreadTest(cat, pooled_sd(groups[a]), pooled_sd(groups[b]), p, ratio))
    return out


def dataset_runs(res, name: str, cat: str) -> list[list[float]]:
    """A model's runs in a category, one list per dataset, each centred on that dataset's mean."""
    return [t.centred_runs for t in res.tasks.get(name, {}).values() if t.category == cat and t.centred_runs]


def deviations(groups: list[list[float]]) -> list[float]:
    """The centred runs of the datasets with more than one: a dataset of one run, centred on itself, is a 0 that
    says nothing of spread, yet would count as a run deviating by nothing in Levene's test and the figure's boxes."""
    return [x for g in groups if len(g) > 1 for x in g]


def pooled_sd(groups: list[list[float]]) -> float | None:
    """The within-dataset std of runs centred per dataset: N runs of k datasets have N - k degrees of freedom (each
    dataset's mean was estimated from its own runs); None where there are none."""
    dof = _dof(groups)
    return math.sqrt(sum(x * x for g in groups for x in g) / dof) if dof > 0 else None


def _dof(groups: list[list[float]]) -> int:
    return sum(len(g) for g in groups) - len(groups)


def arms(res) -> dict[str, dict]:
    """Per size, the split groups ((budget, 'FIRST-THEN') -> share -> run) and the CPT arms of the study's own
    models (source kind 'clm' or 'mlm' -> steps -> run, 0 the source), as the split and CPT tables show them."""
    out: dict[str, dict] = {}
    for r in res.runs.values():
        a = out.setdefault(r["size"], {"splits": {}, "cpt": {}})
        for group, share in r.get("split_shares", {}).items():
            a["splits"].setdefault((r["steps"], group), {})[share] = r["name"]
        if r["kind"] == "cpt" and r["init"]:  # CPT of an imported model: report_text.imported_section
            source = res.runs[r["init"]]
            kind = "clm" if [o for o, _ in source["schedule"]] == ["clm"] else "mlm"
            a["cpt"].setdefault(kind, {})[r["steps"]] = r["name"]
            a["cpt"][kind][0] = source["name"]
    return out
