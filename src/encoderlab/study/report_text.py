"""The words of report.md: the five findings with their verdicts, then every table and figure of the study."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import yaml
from scipy import stats

from encoderlab.study.compare import cmp_rows as _cmp_rows
from encoderlab.study.compare import comparisons_section
from encoderlab.study.coverage import coverage_section
from encoderlab.study.reference import reference_section
from encoderlab.study.results import CATEGORIES, INCONCLUSIVE, OPPOSITE, REPRODUCED, Comparison, tally, verdict

# Where CLM stops being ahead in the paper (docs/paper.md, finding 2: ~10K of 42K steps on SC and QA, ~20K on IR), as a
# share of the budget so that a smaller study judges the same stretch of its training.
EARLY_UNTIL = {"SC": 10 / 42, "QA": 10 / 42, "IR": 20 / 42}
PAPER_TOKENS = 100e9  # docs/paper.md#pretraining: every model of the grid saw ~100B tokens in its 42K steps
# A question the study file does not ask is not a measurement that failed ("not measured: missing evaluations").
NOT_ASKED = "not asked by this study: it trains no {}, which a study file asks for under `{}`"


def _models(res) -> dict:
    """The arms the findings compare, found from the plan: per size, full-budget CLM/MLM, splits, CPT."""
    budget = res.plan["budget"]
    arms: dict[str, dict] = {}
    for r in res.runs.values():
        a = arms.setdefault(r["size"], {"splits": {}, "cpt": {}})
        objs = [o for o, _ in r["schedule"]]
        if r["kind"] == "model" and r["init"] is None:
            if objs == ["clm"] and r["steps"] == budget:
                a["clm"] = r["name"]
            elif objs[0].startswith("mlm") and r["steps"] == budget and (objs[0] == "mlm40" or "mlm" not in a):
                a["mlm"] = r["name"]
        for group, share in r.get("split_shares", {}).items():  # group: 'FIRST-THEN'
            a["splits"].setdefault((r["steps"], group), {})[share] = r["name"]
        if r["kind"] == "cpt" and r["init"]:  # CPT of an imported model: imported_section
            source = res.runs[r["init"]]
            kind = "clm" if [o for o, _ in source["schedule"]] == ["clm"] else "mlm"
            a["cpt"].setdefault(kind, {})[r["steps"]] = r["name"]
            a["cpt"][kind][0] = source["name"]
    return arms


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
    rows, outs = [], []
    for cat in CATEGORIES:
        runs = {}
        for name in (clm, mlm):
            runs[name] = [x for t in res.tasks.get(name, {}).values() if t.category == cat for x in t.centred_runs]
        if not clm or not mlm or len(runs[clm]) < 3 or len(runs[mlm]) < 3:
            continue
        sd = {k: (sum(x * x for x in v) / (len(v) - 1)) ** 0.5 for k, v in runs.items()}
        flat = max(runs[clm]) == min(runs[clm]) and max(runs[mlm]) == min(runs[mlm])
        p = 1.0 if flat else float(stats.levene(runs[clm], runs[mlm]).pvalue)  # Levene is undefined on constants
        # nan where every run sits as far from its median as the others (no spread of spreads): no evidence
        outs.append(INCONCLUSIVE if not p < 0.05 else REPRODUCED if sd[clm] < sd[mlm] else OPPOSITE)
        # the F-test's 80%-power variance ratio, as a guide to the spread ratio Levene could have told apart
        d1, d2 = len(runs[mlm]) - 1, len(runs[clm]) - 1
        ratio = (stats.f.ppf(0.975, d1, d2) / stats.f.ppf(0.2, d1, d2)) ** 0.5
        shown = f"{p:.3f}" if p == p else "undefined (equal deviations)"
        rows.append(f"| {cat} | {sd[clm]:.2f} | {sd[mlm]:.2f} | {shown} | x{ratio:.2f} | {outs[-1]} |")
    text = "not measured (missing evaluations)"
    if outs:
        text = tally(outs, "categories")
    head = ("| category | spread CLM | spread MLM | p (Levene) | detectable spread ratio (80% power) | outcome |\n"
            "|---|---|---|---|---|---|\n")
    table = head + "\n".join(rows) if rows else ""
    return (f"**3. CLM fine-tunes more stably** (spread = std of every LR x seed run's score, centred per "
            f"dataset; reproduced where CLM's spread is smaller with p < 0.05, opposite where it is larger with "
            f"p < 0.05): {text}.\n\n{table}\n")


def _higher(comps: list[Comparison]) -> str:
    """Where the first model is higher, and significantly so; a category where both sit at the trivial baseline
    counts for neither (as in the pairwise tables and the findings: a difference of noise is no win)."""
    measured = [c for c in comps if c.measurable]
    up = [c for c in measured if c.diff > 0]
    down = [c for c in measured if c.diff < 0 and c.significant]
    sig = sum(c.significant for c in up)
    unmeasured = len(comps) - len(measured)
    return (f"higher in {len(up)}/{len(measured)} categories, significantly in {sig}"
            + (f", significantly lower in {len(down)}" if down else "")
            + (f" ({unmeasured} not measurable: both at the trivial baseline)" if unmeasured else ""))


def imported_section(report) -> str:
    """Each imported model, the from-scratch model of its architecture and its CPT arms, side by side."""
    res = report.res
    parts = []
    for label, e in res.evaluations.items():
        if e["kind"] != "imported":
            continue
        name = e["size"]
        cpt = sorted((r for r in res.runs.values() if r.get("imported") == name), key=lambda r: r["steps"])
        obj = cpt[-1]["schedule"][0][0] if cpt else None
        scratch = [r for r in res.runs.values() if r["size"] == name and r["kind"] == "model" and r["init"] is None
                   and (obj is None or [o for o, _ in r["schedule"]] == [obj])]
        scratch = sorted(scratch, key=lambda r: abs(r["steps"] - cpt[-1]["steps"]) if cpt else 0)[:1]
        parts.append(report.category_table([label] + [r["name"] for r in scratch + cpt], f"imported-{name}",
                                           f"{name}: imported, from scratch with its architecture, and continued "
                                           "pretraining (CPT)"))
        if not cpt:
            continue
        arm = cpt[-1]
        baselines = {label: "no CPT"} | {r["name"]: "from scratch, " + (f"the same {r['steps']} steps" if r["steps"]
                                         == arm["steps"] else f"{r['steps']} steps against CPT's {arm['steps']}")
                                         for r in scratch}
        comps = {b: _pair(res, arm["name"], b) for b in baselines}
        if len(comps) < 2:
            head = "no from-scratch model of this architecture to compare with"
        elif not all(comps.values()):
            head = "not measured (missing evaluations)"
        elif not all(sum(c.diff > 0 for c in cs) * 2 > len(cs) for cs in comps.values()):
            head = "CPT did not beat both baselines"
        elif all(any(c.diff > 0 and c.significant for c in cs) for cs in comps.values()):
            head = "CPT beat both baselines"
        else:
            head = "CPT beat both baselines in most categories, but not significantly against both"
        detail = "; ".join(f"vs {b} ({why}): {_higher(comps[b])}" for b, why in baselines.items())
        parts.append(f"**Verdict ({arm['name']}): {head}.** {detail}. (Welch's t-test on category scores, "
                     "datasets as independent estimates, p < 0.05.)\n")
    return "## Continued pretraining of imported models\n\n" + "\n".join(parts) if parts else ""


def compose(report) -> str:
    res = report.res
    plan, proto = res.plan, res.plan["protocol"]
    finals = [lb for lb, e in res.evaluations.items()
              if e["kind"] in ("final", "random", "imported", "checkpoint")]
    everything = list(res.evaluations)
    done = sum(1 for ts in res.tasks.values() for t in ts.values() for _ in range(t.runs))
    seen = _tokens_seen(plan)
    scale = (f"The full-budget models saw {seen} pretraining tokens each: read every verdict below at that scale. "
             if res.runs else "")
    paper = findings(report)
    parts = [f"# Study `{plan['study']}`: report\n",
             f"Written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from `{res.root}`. "
             f"{len(res.runs)} pretrained models, {len(res.evaluations)} evaluated checkpoints, {done} fine-tuning "
             f"records (protocol `{proto['name']}`: {len(proto['lrs'])} LRs x {len(proto['seeds'])} seeds, up to "
             f"{proto['max_steps']} steps). {scale}{report.basis()} Every table and finding below uses them.\n",
             _unfinished(res),
             report.sanity_section(),
             imported_section(report),
             paper,
             comparisons_section(report, bool(paper)),
             "## Category scores per model (the paper's Tables 2-5 layout)\n",
             report.category_table(finals, "categories", "Final models and the random-init baseline"
                                   if any(e["kind"] == "random" for e in res.evaluations.values())
                                   else "Final models" if res.runs else "Models"),
             reference_section(report),
             "## Per-dataset scores\n", report.dataset_tables(everything), coverage_section(res)]
    fig, note = report.efficiency_figure()
    if fig:
        parts.append(f"## Data efficiency (score vs pretraining steps)\n\n![data efficiency]({fig})\n\n{note}"
                     "Intermediate checkpoints are stable-phase (undecayed) states of the full-budget runs; the "
                     "last point of a solid line is the decayed final model; dashed lines are continued "
                     "pretraining from it, drawn at the source's steps plus their own. CSV: `data_efficiency.csv`\n")
    fig, table = report.stability_figure([lb for lb in finals if res.evaluations[lb]["kind"] == "final"])
    if fig:
        parts.append(f"## Fine-tuning stability\n\n![stability]({fig})\n\n{table}\n")
    for size, a in _models(res).items():
        for (budget, group), shares in sorted(a["splits"].items()):
            if len(shares) > 1:
                labels = [shares[s] for s in sorted(shares)]
                first, then = group.split("-", 1)
                title = f"{first.upper()}/{then.upper()} splits at {budget} steps ({size}; the paper's Tables 10-13)"
                parts.append(report.category_table(labels, f"splits-{size}-{budget}-{group}", title,
                                                   lambda lb, sh=shares, f=first: _share_name(lb, sh, f)))
        for kind, arms in sorted(a["cpt"].items()):
            labels = [arms[s] for s in sorted(arms)]
            parts.append(report.category_table(labels, f"cpt-{size}-from-{kind}",
                                               f"CPT with MLM from the {kind.upper()} model ({size}; the paper's "
                                               "Tables 14-17; the first row is the starting point)"))
    fig = report.loss_figure()
    if fig:
        parts.append(f"## Pretraining loss\n\n![pretraining loss]({fig})\n")
    parts += [text for text in [_failed_and_missing(res, proto)] if text]
    parts.append("## Protocol\n\n```yaml\n" + yaml.safe_dump(proto, sort_keys=False) + "```\n\n"
                 "Plan (steps and FLOPs): " + _plan_line(plan) + "\n")
    return "\n".join(parts)


def _unfinished(res) -> str:
    """First of all, the jobs the last `study run` left failed or skipped: every number below lacks them."""
    if not res.unfinished:
        return ""
    failed = [j for j in res.unfinished if j["status"] != "skipped"]
    lines = [f"- {j['job']}: **{j['status']}**: {(j['reason'].strip().splitlines() or [''])[0]}"
             for j in res.unfinished]
    return (f"**This study is not complete: {len(failed)} job(s) failed and {len(res.unfinished) - len(failed)} "
            "were skipped** in its last `study run` (which runs them again once the cause is fixed); a model whose "
            "pretraining failed is not a trained model, whatever the plan's counts above say.\n\n"
            + "\n".join(lines) + "\n")


def _failed_and_missing(res, proto: dict) -> str:
    """The runs the tables leave out, and why: failed, unscored in the metric shown, missing, or not used."""
    tasks = [(lb, t) for lb, ts in res.tasks.items() for t in ts.values()]
    grid = len(proto["lrs"]) * len(proto["seeds"])
    lines = ([f"- {lb} / {t.task}: {t.failed} failed runs (excluded from the means)" for lb, t in tasks if t.failed]
             + [f"- {lb} / {t.task}: {t.without_metric} runs without a `{res.metric}` score (recorded before it "
                "existed; excluded)" for lb, t in tasks if t.without_metric]
             + [_incomplete_lrs(lb, t) for lb, t in tasks if (t.summary or {}).get("incomplete_lrs")]
             + [f"- {lb}: no evaluation records yet" for lb in res.evaluations if not res.tasks.get(lb)]
             + [f"- {lb} / {t.task}: {t.runs} of {grid} runs recorded, the others missing (`study run` does them)"
                for lb, t in tasks if t.runs < grid]
             + [f"- not used (`study run` does the run again): `{why}`" for why in res.unused])
    return "## Failed and missing runs\n\n" + "\n".join(lines) + "\n" if lines else ""


def _incomplete_lrs(label: str, t) -> str:
    """Under mean_over_seeds, the LRs whose mean is over fewer seeds than the others': they do not compete."""
    short = t.summary["incomplete_lrs"]
    lrs = ", ".join(f"{lr} ({n} of {short['seeds']} seeds)" for lr, n in short["lrs"].items())
    return (f"- {label} / {t.task}: LR {lrs} " + ("compete on the seeds they have: no LR has every seed"
                                                  if short["competed"] else
                                                  "left out of the LR choice (`mean_over_seeds` compares means "
                                                  "over every seed)"))


def _tokens_seen(plan: dict) -> str:
    """The full-budget models' pretraining tokens: one count, or their range where their windows differ (an
    imported architecture's from-scratch model packs the text with its own tokenizer and length)."""
    scratch = [r for r in plan["runs"] if r["init"] is None and not r.get("imported")]
    steps = max((r["steps"] for r in scratch), default=0)
    counts = sorted({r["steps"] * r["tokens_per_step"] for r in scratch if r["steps"] == steps}) or [0]
    return f"{counts[0]:,}" if len(counts) == 1 else f"between {counts[0]:,} and {counts[-1]:,}"


def _tokens(plan: dict) -> int:
    return max((r["steps"] * r["tokens_per_step"] for r in plan["runs"] if r["init"] is None
                and not r.get("imported")), default=0)


def _share_name(label: str, shares: dict, first: str) -> str:
    share = next((s for s, lb in shares.items() if lb == label), None)
    return f"{label} ({share:g}% {first.upper()})" if share is not None else label


def _plan_line(plan: dict) -> str:
    s = plan["summary"]
    return (f"{s['steps']:,} steps trained ({s['naive_steps']:,} if every model were trained alone), "
            f"{s['flops']:.3g} FLOPs vs {s['naive_flops']:.3g}.")
