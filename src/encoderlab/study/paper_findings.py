"""The paper's five findings (docs/paper.md), a plug-in of the report that a study turns on with `findings: paper`:
which of its models play the paper's CLM, MLM, split and CPT parts (found by objective from the plan), the paper's
direction for each comparison, its crossover steps and token budget, and the words "reproduced", "opposite" and
"inconclusive at this scale"."""
from __future__ import annotations

from dataclasses import replace

from encoderlab.study.compare import arms, spread_tests
from encoderlab.study.compare import cmp_rows as _cmp_rows
from encoderlab.study.results import INCONCLUSIVE, OPPOSITE, REPRODUCED, Comparison, tally, verdict

# The paper's table numbers, cited beside the report's tables of the same layout only where the plug-in is on.
CITES = {"categories": " (the paper's Tables 2-5 layout)", "splits": "; the paper's Tables 10-13",
         "cpt": "; the paper's Tables 14-17", "stability": "Finding 3's Levene test"}

# Where CLM stops being ahead in the paper (docs/paper.md, finding 2: ~10K of 42K steps on SC and QA, ~20K on IR), as a
# share of the budget so that a smaller study judges the same stretch of its training.
EARLY_UNTIL = {"SC": 10 / 42, "QA": 10 / 42, "IR": 20 / 42}
PAPER_TOKENS = 100e9  # docs/paper.md#pretraining: every model of the grid saw ~100B tokens in its 42K steps
# A question the study file does not ask is not a measurement that failed ("not measured: missing evaluations").
NOT_ASKED = "not asked by this study: it trains no {}, which a study file asks for under `{}`"


def _models(res) -> dict:
    """The arms the findings compare, found from the plan: per size, full-budget CLM/MLM (MLM 40% where several
    masking rates ran, as the paper's headline compares), splits, CPT."""
    budget = res.plan["budget"]
    out = arms(res)
    for r in res.runs.values():
        a = out[r["size"]]
        objs = [o for o, _ in r["schedule"]]
        if r["kind"] == "model" and r["init"] is None:
            if objs == ["clm"] and r["steps"] == budget:
                a["clm"] = r["name"]
            elif objs[0].startswith("mlm") and r["steps"] == budget and (objs[0] == "mlm40" or "mlm" not in a):
                a["mlm"] = r["name"]
    return out


def _mlm_alone(res, mlm: str | None, budget: int, group: str) -> str | None:
    """The full-budget model of the split's second objective alone, when the splits do not list a 0% share."""
    if mlm and res.runs[mlm]["steps"] == budget and [o for o, _ in res.runs[mlm]["schedule"]] == [group.split("-")[1]]:
        return mlm
    return None


def _pair(res, a: str | None, b: str | None) -> list[Comparison]:
    return res.versus(a, b) if a and b else []


FINDINGS_RULE = (
    "Each compares category scores (mean over the category's datasets) with Welch's t-test, A minus B with A the "
    "side the paper finds better; the variance of A - B sums each dataset's variance of its mean over seeds on both "
    "sides (datasets and models as independent estimates, Welch-Satterthwaite df; docs/evaluation.md, Intervals). "
    "**Rule, per comparison**: *reproduced* when its 95% interval lies above zero, *opposite* when it lies below "
    "zero, *inconclusive at this scale* when it contains zero (or no interval exists), and *not measurable* when "
    "both models are at the trivial baseline's level (each within 5% of the headroom above its datasets' mean "
    "trivial baseline, or within its own interval of it), whatever the interval. 'detectable' is the smallest "
    "difference the run would have found 80% of the time at alpha 0.05, (t(0.975, df) + t(0.8, df)) x SE with "
    "Welch-Satterthwaite's df. A finding is **reproduced** when more than half of its measurable comparisons are "
    "reproduced and none is opposite, **opposite** in the mirror case, and **inconclusive at this scale** otherwise "
    "(intervals that include zero, or both directions). 'vs strongest baseline' is each side's category score "
    "minus the mean of its datasets' strongest baselines (TF-IDF, BM25, majority class, ...).\n")


def findings(report) -> str:
    res = report.res
    out = ["## The paper's five findings at this scale\n", FINDINGS_RULE]
    compared = {size: a for size, a in _models(res).items() if (a.get("clm") and a.get("mlm")) or a["splits"]
                or a["cpt"]}
    if not compared:
        return ""
    for size, a in compared.items():
        clm, mlm = a.get("clm"), a.get("mlm")
        comps = _pair(res, mlm, clm)
        text = NOT_ASKED.format("full-budget CLM and MLM models of this size", "models:")
        if clm and mlm:
            text = verdict(comps) + (_early_phase(res.plan) if comps else "")
        out.append(f"### {size}\n\n**1. MLM beats CLM on most tasks** (A = {mlm}, B = {clm}): "
                   f"{text}.\n\n{_cmp_rows(comps) if comps else ''}\n")
        out.append(_early_finding(res, clm, mlm))
        out.append(_stability_finding(res, clm, mlm))
        comps, which = [], None
        for budget, group in sorted(a["splits"], reverse=True):
            shares = a["splits"][(budget, group)]
            mids = sorted(s for s in shares if 0 < s < 100)
            alone = shares.get(0.0) or _mlm_alone(res, mlm, budget, group)
            if mids and alone and group.startswith("clm-"):
                pick = min(mids, key=lambda s: abs(s - 25))  # the paper's best split, 25% CLM, chosen beforehand
                which = (shares[pick], alone, budget, pick)
                comps = _pair(res, shares[pick], alone)
                break
        label = f"A = {which[0]} ({which[3]:g}% CLM), B = {which[1]}" if which else "no split and MLM pair"
        text = verdict(comps) if a["splits"] else NOT_ASKED.format("CLM->MLM split", "splits:")
        out.append(f"**4. CLM then MLM beats MLM alone at the same budget** ({label}): {text}.\n\n"
                   f"{_cmp_rows(comps) if comps else ''}\n")
        cpt = a["cpt"]
        comps, label = [], "no CPT pair"
        if "clm" in cpt and "mlm" in cpt:
            longest = max(set(cpt["clm"]) & set(cpt["mlm"]))
            comps = _pair(res, cpt["clm"][longest], cpt["mlm"][longest])
            label = f"A = {cpt['clm'][longest]}, B = {cpt['mlm'][longest]}"
        asked = "clm" in cpt and "mlm" in cpt
        text = verdict(comps) if asked else NOT_ASKED.format("MLM continued pretraining of both models", "cpt:")
        out.append(f"**5. CPT with MLM works better from a CLM model than from an MLM one** ({label}): "
                   f"{text}.\n\n{_cmp_rows(comps) if comps else ''}\n")
    return "\n".join(out)


def _early_phase(plan: dict) -> str:
    """Where a study's token budget stands against the paper's own crossover: below it, the paper has CLM ahead."""
    tokens, until = _tokens(plan), min(EARLY_UNTIL.values()) * PAPER_TOKENS
    if not 0 < tokens < until:
        return ""
    return (f". Read it against the paper's Finding 2: its CLM models lead its MLM ones until ~10K of 42K steps "
            f"(~{until / 1e9:.0f}B tokens) on SC and QA and ~20K (~48B) on IR; this study's models saw "
            f"{tokens / 1e6:,.1f}M tokens, inside that early phase, where the paper's own models have CLM ahead")


def _early_finding(res, clm: str | None, mlm: str | None) -> str:
    """Finding 2 over every intermediate checkpoint of both models before the paper's crossover in each category."""
    budget = res.plan["budget"]
    pairs: dict[int, dict[str, str]] = {}
    for label, e in res.evaluations.items():
        if e["kind"] == "intermediate" and e["model"] in (clm, mlm):
            pairs.setdefault(e["step"], {})[e["model"]] = label
    comps = [replace(c, category=f"{c.category} at {step:,}")
             for step, pair in sorted(pairs.items()) if clm in pair and mlm in pair
             for c in _pair(res, pair[clm], pair[mlm]) if step <= EARLY_UNTIL.get(c.category, 0) * budget]
    until = ", ".join(f"{cat} to step {share * budget:,.0f}" for cat, share in EARLY_UNTIL.items())
    both = [step for step, pair in pairs.items() if clm in pair and mlm in pair]
    early = any(step <= max(EARLY_UNTIL.values()) * budget for step in both)
    text = verdict(comps, unit="checkpoint x category comparisons") if comps or early else \
        "not measured (no intermediate checkpoint before the paper's crossover)" if both else \
        NOT_ASKED.format("intermediate checkpoints of both models", "intermediate:")
    return (f"**2. CLM learns faster early** (A = CLM, B = MLM, at every intermediate checkpoint up to the paper's "
            f"crossover, at this budget: {until}; the paper gives none for TC): "
            f"{text}.\n\n{_cmp_rows(comps) if comps else ''}\n")


def _stability_finding(res, clm: str | None, mlm: str | None) -> str:
    """Levene's test on the spread of every run, per category, labelled like the other findings' comparisons."""
    tests = spread_tests(res, clm, mlm)
    outs = [INCONCLUSIVE if not t.significant else REPRODUCED if t.sd_a < t.sd_b else OPPOSITE for t in tests]
    text = tally(outs, "categories") if outs else "not measured (missing evaluations)"
    head = ("| category | spread CLM | spread MLM | p (Levene) | detectable spread ratio (80% power) | outcome |\n"
            "|---|---|---|---|---|---|\n")
    table = head + "\n".join(t.row(o) for t, o in zip(tests, outs)) if tests else ""
    return (f"**3. CLM fine-tunes more stably** (spread = std of every LR x seed run's score, centred per "
            f"dataset; reproduced where CLM's spread is smaller with p < 0.05, opposite where it is larger with "
            f"p < 0.05): {text}.\n\n{table}\n")


def _tokens(plan: dict) -> int:
    return max((r["steps"] * r["tokens_per_step"] for r in plan["runs"] if r["init"] is None
                and not r.get("imported")), default=0)
