"""The words of report.md: the sanity check, the comparisons the study declares (and the named set it turns on, such
as the paper's five findings), then every table and figure of the study."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone

import yaml

from encoderlab.study import paper_findings
from encoderlab.study.compare import arms, comparisons_section
from encoderlab.study.comparisons import declared, declared_sections, findings_set
from encoderlab.study.coverage import coverage_section
from encoderlab.study.mteb_report import mteb_section
from encoderlab.study.reference import reference_section
from encoderlab.study.results import Comparison

# The named sets of comparisons (a study's `findings:`, one of spec.FINDINGS): each writes its section and cites its
# source's tables.
FINDINGS_WRITERS = {"paper": (paper_findings.findings, paper_findings.CITES)}

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
            + (f" ({unmeasured} not measurable: each within its interval, or 5% of the headroom, of the trivial "
               "baseline)" if unmeasured else ""))


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
        comps = {b: res.versus(arm["name"], b) for b in baselines}
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
    done = sum(1 for ts in res.tasks.values() for t in ts.values() for _ in range(t.runs))
    seen = _tokens_seen(plan)
    scale = (f"The full-budget models saw {seen} pretraining tokens each: read every verdict below at that scale. "
             if res.runs else "")
    write_findings, cites = FINDINGS_WRITERS.get(findings_set(plan), (lambda report: "", defaultdict(str)))
    named = write_findings(report)
    parts = [f"# Study `{plan['study']}`: report\n",
             f"Written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from `{res.root}`. "
             f"{len(res.runs)} pretrained models, {len(res.evaluations)} evaluated checkpoints, {done} fine-tuning "
             f"records (protocol `{proto['name']}`: {len(proto['lrs'])} LRs x {len(proto['seeds'])} seeds, up to "
             f"{proto['max_steps']} steps). {scale}{report.basis()} Every table and finding below uses them.\n",
             _unfinished(res),
             report.sanity_section(),
             imported_section(report),
             named,
             # a study that declares no comparison still compares its models, pair by pair
             declared_sections(report) if declared(plan) else comparisons_section(report, bool(named)),
             f"## Category scores per model{cites['categories']}\n",
             report.category_table(finals, "categories", "Final models and the random-init baseline"
                                   if any(e["kind"] == "random" for e in res.evaluations.values())
                                   else "Final models" if res.runs else "Models"),
             reference_section(report),
             "## Per-dataset scores\n", report.dataset_tables(list(res.evaluations)), coverage_section(res),
             mteb_section(res.root, finals, plan.get("spec", {}).get("evaluation", {}).get("mteb"))]
    parts += _figures_and_arms(report, finals, cites)
    parts += [text for text in [_failed_and_missing(res, proto)] if text]
    parts.append("## Protocol\n\n```yaml\n" + yaml.safe_dump(proto, sort_keys=False) + "```\n"
                 + (f"\nPlan (steps and FLOPs): {_plan_line(plan['summary'])}\n" if "summary" in plan else ""))
    return "\n".join(parts)


def _figures_and_arms(report, finals: list[str], cites: dict[str, str]) -> list[str]:
    """Data efficiency and stability figures, the split and CPT tables, the loss curves: each where the study has it."""
    res, parts = report.res, []
    fig, note = report.efficiency_figure()
    if fig:
        parts.append(f"## Data efficiency (score vs pretraining steps)\n\n![data efficiency]({fig})\n\n{note}"
                     "Intermediate checkpoints are stable-phase (undecayed) states of the full-budget runs; the "
                     "last point of a solid line is the decayed final model; dashed lines are continued "
                     "pretraining from it, drawn at the source's steps plus their own. CSV: `data_efficiency.csv`\n")
    fig, table = report.stability_figure([lb for lb in finals if res.evaluations[lb]["kind"] == "final"],
                                         cites["stability"])
    if fig:
        parts.append(f"## Fine-tuning stability\n\n![stability]({fig})\n\n{table}\n")
    for size, a in arms(res).items():
        for (budget, group), shares in sorted(a["splits"].items()):
            if len(shares) > 1:
                labels = [shares[s] for s in sorted(shares)]
                first, then = group.split("-", 1)
                title = f"{first.upper()}/{then.upper()} splits at {budget} steps ({size}{cites['splits']})"
                parts.append(report.category_table(labels, f"splits-{size}-{budget}-{group}", title,
                                                   lambda lb, sh=shares, f=first: _share_name(lb, sh, f)))
        for kind, steps in sorted(a["cpt"].items()):
            labels = [steps[s] for s in sorted(steps)]
            parts.append(report.category_table(labels, f"cpt-{size}-from-{kind}",
                                               f"CPT with MLM from the {kind.upper()} model ({size}{cites['cpt']}; "
                                               "the first row is the starting point)"))
    fig = report.loss_figure()
    if fig:
        parts.append(f"## Pretraining loss\n\n![pretraining loss]({fig})\n")
    return parts


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
             + [f"- {lb} / {t.task}: {n} runs whose `{res.metric}` score is not a finite number (excluded)"
                for lb, t in tasks if (n := (t.summary or {}).get("not_finite"))]
             + [_incomplete_lrs(lb, t) for lb, t in tasks if (t.summary or {}).get("incomplete_lrs")]
             + [f"- {lb}: no evaluation records yet" for lb in res.evaluations if not res.tasks.get(lb)]
             + [f"- {what}: no records (planned; `study run` does them)" for what in res.no_records]
             + [f"- {lb} / {t.task}: {t.runs} of {grid} runs recorded, the others missing (`study run` does them)"
                for lb, t in tasks if t.runs < grid]
             + [f"- not used (`study run` does the run again): `{why}`" for why in res.unused]
             + [f"- {what}: records of a task the study file no longer evaluates there (not counted)"
                for what in res.not_planned]
             + [f"- {what}: records of other data than the task's files hold now (not counted; `study run` does "
                "them again)" for what in res.other_data])
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


def _share_name(label: str, shares: dict, first: str) -> str:
    share = next((s for s, lb in shares.items() if lb == label), None)
    return f"{label} ({share:g}% {first.upper()})" if share is not None else label


def _plan_line(s: dict) -> str:
    """The plan's totals; a plan.json that encoderlab did not write may lack them (no line then, not a KeyError)."""
    return (f"{s['steps']:,} steps trained ({s['naive_steps']:,} if every model were trained alone), "
            f"{s['flops']:.3g} FLOPs vs {s['naive_flops']:.3g}.")
