"""A study's report counts what the study ran and asks: the sanity check over the categories compared, no verdict
on two models at the trivial baseline, pairwise comparisons of its models, no CPT wording without CPT."""
from __future__ import annotations

import json
from types import SimpleNamespace

from test_study_verdicts import CLM, CPT, MLM, RANDOM, TASKS, finding, flat, write_study

from encoderlab.core.io import write_json
from encoderlab.study.report import Report
from encoderlab.study.paper_findings import findings
from encoderlab.study.report_text import compose
from encoderlab.study.results import NOT_MEASURABLE, StudyResults

THREE = [t for t in TASKS if TASKS[t][0] != "QA"]  # SC, TC and IR: three categories run


def test_the_sanity_check_counts_against_the_categories_run(tmp_path):
    """Three categories run: a model holding in all three passes ("3 of the 3"), one holding in 1 does not; the
    headline never speaks of 4 categories."""
    levels = {RANDOM: flat(30.0), CLM: flat(40.0), MLM: {"SC": 40.0, "TC": 30.0, "IR": 20.0}}
    root = write_study(tmp_path, levels, tasks=dict.fromkeys(levels, THREE))
    text = Report(root).sanity_section()
    assert "It holds in at least 3 of the 3 categories compared for 1 of 2 pretrained final models" in text, text
    assert "3 of 4" not in text and "holds in 3/3 categories" in text and "holds in 1/3 categories" in text


def test_two_models_at_the_trivial_baseline_are_not_measurable_not_opposite(tmp_path):
    """Retrieval at 0.8 and 3.3 NDCG@10 against a random ranking's 0.44: Finding 1 gets no direction from IR; the
    other categories, well above their baselines, still decide."""
    levels = {CLM: {**flat(60.0), "IR": 3.3}, MLM: {**flat(70.0), "IR": 0.8}}
    root = write_study(tmp_path, levels, spread={CLM: 0.1, MLM: 0.1}, baseline={"IR": 0.44, "SC": 50.0})
    line = finding(findings(SimpleNamespace(res=StudyResults(root))), 1)
    assert f"**reproduced** (reproduced in 3, {NOT_MEASURABLE} in 1 of 4" in line, line
    assert "opposite" not in line
    # the IR row says so; with every category at the baseline the finding itself is not measurable
    assert "| IR | 0.80 | 3.30 | -2.50 |" in findings(SimpleNamespace(res=StudyResults(root))).split("**2.")[0]
    both = write_study(tmp_path / "all", {CLM: flat(3.3), MLM: flat(0.8)}, spread={CLM: 0.1, MLM: 0.1},
                       baseline=flat(0.44))
    line = finding(findings(SimpleNamespace(res=StudyResults(both))), 1)
    assert line.split(": ", 1)[1].startswith(f"**{NOT_MEASURABLE}** ("), line


def test_not_measurable_says_the_rule_for_a_score_well_above_the_baseline_within_its_interval(tmp_path):
    """IR 8.80 and 8.60 above the trivial baseline, each within its wide interval of it, read "both at the trivial
    baseline": the words now say the rule (within the interval, or 5% of the headroom)."""
    root = write_study(tmp_path, {CLM: {**flat(60.0), "IR": 9.24}, MLM: {**flat(70.0), "IR": 9.04}},
                       spread={CLM: 6.0, MLM: 6.0}, baseline={"IR": 0.44, "SC": 50.0})
    text = findings(SimpleNamespace(res=StudyResults(root)))
    ir_row = next(row for row in text.split("**2.")[0].split("\n") if row.startswith("| IR | 9.04 | 9.24 |"))
    assert ir_row.split(" | ")[7] == "not measurable (each within its interval, or 5% of the headroom, of the trivial "\
                                     "baseline)", ir_row
    assert "(both at the trivial baseline)" not in text


def test_a_study_without_cpt_or_paper_findings_is_reported_as_asked(tmp_path):
    """Two final models and no CLM/MLM pair: no paper findings, every pair compared over the categories run, and
    the loss axis without continued pretraining."""
    root = write_study(tmp_path, {CLM: {"SC": 70.0, "TC": 50.0, "IR": 40.0}, CPT: flat(50.0)},
                       tasks=dict.fromkeys([CLM, CPT], THREE))
    plan = json.loads((root / "plan.json").read_text())
    plan["runs"] = [r for r in plan["runs"] if r["name"] == CLM]
    plan["evaluations"] = [e for e in plan["evaluations"] if e["label"] in (CLM, CPT)]
    plan["evaluations"][1]["kind"] = "checkpoint"  # an existing model beside the study's own
    plan["summary"] = {"steps": 20, "naive_steps": 20, "flops": 1.0, "naive_flops": 1.0}
    write_json(root / "plan.json", plan)
    (root / "pretrain" / CLM).mkdir(parents=True)
    (root / "pretrain" / CLM / "metrics.jsonl").write_text(json.dumps({"step": 2, "clm/loss": 5.0}) + "\n")
    report = Report(root)
    text = compose(report)
    assert "five findings" not in text
    pair = text.split(f"**A = {CLM}, B = {CPT}**: ")[1].split("\n")[0]
    assert pair == ("A higher in 1, B higher in 1, no difference shown (the interval includes zero) in 1 of 3 "
                    "categories."), pair
    assert "| SC | 70.00 | 50.00 | +20.00 |" in text and "| A higher |" in text
    assert "random-init baseline" not in text.split("## Category scores per model")[1].split("\n\n")[1]  # none ran
    import matplotlib.pyplot as plt

    seen = []
    original = plt.Axes.set_xlabel
    plt.Axes.set_xlabel = lambda ax, label, *a, **k: seen.append(label) or original(ax, label, *a, **k)
    try:
        report.loss_figure()
    finally:
        plt.Axes.set_xlabel = original
    assert seen == ["step"]
