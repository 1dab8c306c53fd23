"""The report's verdicts on study records built to each case: a finding reproduced, opposite or inconclusive (with
the effect the run could have detected), the sanity check holding or not, and continued pretraining drawn from its
source's last step."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from encoderlab.core.io import write_json
from encoderlab.finetuning import records
from encoderlab.study.report import Report, _bounded_bars
from encoderlab.study.paper_findings import findings
from encoderlab.study.results import StudyResults

PROTOCOL = {"name": "t", "lrs": [0.001], "seeds": list(range(8)), "max_steps": 4}
TASKS = {"rt-polarity": ("SC", "classification"), "conll-pos": ("TC", "tokens"), "wiki-cloze": ("QA", "qa"),
         "wiki-title": ("IR", "retrieval")}
CLM, MLM, CPT, RANDOM = "micro-clm-20", "micro-mlm40-20", "micro-clm-dec20-mlm40-26", "micro-random"


def write_study(root: Path, levels: dict[str, dict[str, float]], spread: dict[str, float] | None = None,
                tasks: dict[str, list[str]] | None = None, baseline: dict[str, float] | None = None) -> Path:
    """plan.json and one record per (evaluation, task, seed): score = the task's (or else its category's) level
    for that evaluation + spread x (seed - 3.5), so every seed set has exactly that mean and a known deviation."""
    runs = [{"name": CLM, "size": "micro", "kind": "model", "schedule": [["clm", 0]], "steps": 20, "init": None},
            {"name": MLM, "size": "micro", "kind": "model", "schedule": [["mlm40", 0]], "steps": 20, "init": None},
            {"name": CPT, "size": "micro", "kind": "cpt", "schedule": [["mlm40", 0]], "steps": 6, "init": CLM}]
    for run in runs:
        run["tokens_per_step"] = 4096
    kinds = {CLM: ("final", CLM, 20), MLM: ("final", MLM, 20), CPT: ("final", CPT, 6), RANDOM: ("random", RANDOM, 0),
             f"{CLM}-8": ("intermediate", CLM, 8)}
    evaluations = [{"label": lb, "model": model, "step": step, "kind": kind, "size": "micro", "tag": f"tag-{lb}"}
                   for lb, (kind, model, step) in kinds.items()]
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / "plan.json", {"study": "s", "budget": 20, "protocol": PROTOCOL, "runs": runs,
                                    "evaluations": evaluations})
    key = records.protocol_key(PROTOCOL)
    for lb, level in levels.items():
        for task in (tasks or {}).get(lb, TASKS):
            cat, family = TASKS.get(task, ("SC", "classification"))
            for seed in PROTOCOL["seeds"]:
                score = level.get(task, level[cat]) + (spread or {}).get(lb, 1.0) * (seed - 3.5)
                records.write(records.record_path(root / "evals", f"tag-{lb}", key, task, "0" * 16, 0.001, seed), {
                    "tag": f"tag-{lb}", "task": task, "family": family, "metric": "accuracy", "status": "ok",
                    "fingerprint": "0" * 16, "protocol": PROTOCOL,
                    "lr": 0.001, "seed": seed, "baseline": {s: {"score": (baseline or {}).get(cat, 0.0)}
                                                      for s in ("validation", "test")},
                    "scores": {"validation": {"score": score}, "test": {"score": score}}})
    return root


def flat(x: float) -> dict[str, float]:
    return dict.fromkeys(("SC", "TC", "QA", "IR"), x)


def finding(text: str, number: int) -> str:
    return text.split(f"**{number}. ")[1].split("\n")[0]


def test_finding_one_is_reproduced_opposite_or_inconclusive_by_its_intervals(tmp_path):
    # 8 seeds with sd 2.45 each side: SE 1.22, Welch df 14, the 95% interval ± 2.63, detectable (2.14 + 0.87) x SE
    cases = {"reproduced": 10.0, "opposite": -10.0, "inconclusive at this scale": 1.0}
    for label, gap in cases.items():
        root = write_study(tmp_path / label, {CLM: flat(50.0), MLM: flat(50.0 + gap)})
        line = finding(findings(SimpleNamespace(res=StudyResults(root))), 1)
        assert f"(A = {MLM}, B = {CLM}): **{label}** ({label} in 4 of 4 categories)" in line, line
        # only an interval that includes zero says what the run could have detected, and never "not reproduced"
        assert ("could have detected differences of 3.69 points" in line) == (gap == 1.0), line
        assert "not reproduced" not in line
    # one category each way is not a finding in either direction
    root = write_study(tmp_path / "mixed", {CLM: flat(50.0), MLM: {"SC": 60.0, "TC": 40.0, "QA": 60.0, "IR": 51.0}})
    line = finding(findings(SimpleNamespace(res=StudyResults(root))), 1)
    assert "**inconclusive at this scale** (reproduced in 2, opposite in 1, inconclusive at this scale in 1" in line


def test_finding_three_labels_the_spread_by_levene(tmp_path):
    cases = {"reproduced": (1.0, 6.0), "opposite": (6.0, 1.0), "inconclusive at this scale": (2.0, 2.0)}
    for label, (clm, mlm) in cases.items():
        root = write_study(tmp_path / label, {CLM: flat(50.0), MLM: flat(50.0)}, spread={CLM: clm, MLM: mlm})
        line = finding(findings(SimpleNamespace(res=StudyResults(root))), 3)
        assert f"**{label}** ({label} in 4 of 4 categories)" in line, line


def test_sanity_section_holds_only_where_the_interval_is_above_zero(tmp_path):
    levels = {RANDOM: flat(30.0), CLM: {**flat(40.0), "imdb-polarity": 90.0},
              MLM: {"SC": 40.0, "TC": 31.0, "QA": 40.0, "IR": 20.0}, CPT: flat(40.0)}
    # the random-init model ran two datasets; imdb-polarity, which only CLM ran, would make its SC gap +35
    tasks = {RANDOM: ["rt-polarity", "wiki-title"], CLM: [*TASKS, "imdb-polarity"], MLM: list(TASKS), CPT: list(TASKS)}
    root = write_study(tmp_path, levels, tasks=tasks)
    text = Report(root).sanity_section()
    rows = {line.strip("| ").split(" | ")[0]: line.strip("| ").split(" | ")[1:] for line in text.splitlines()
            if line.startswith("| micro")}
    assert set(rows) == {CLM, MLM, CPT}  # final pretrained models only: no intermediate, not the baseline itself
    sc, tc, qa, ir, verdict = rows[CLM]
    assert sc.startswith("**yes**: +10.00 ±") and ir.startswith("**yes**: +10.00 ±") and tc == qa == "-"
    assert verdict == "holds in 2/2 categories"
    sc, _, _, ir, verdict = rows[MLM]
    assert sc.startswith("**yes**: +10.00 ±") and ir.startswith("no: -10.00 ±") and verdict == "holds in 1/2 categories"
    # counted against the 2 categories each was compared on (3 of 4 would be out of reach): CLM and CPT hold in both
    assert "It holds in at least 2 of the 2 categories compared for 2 of 3 pretrained final models" in text
    assert (root / "report" / "sanity.csv").read_text().count("\n") == 1 + 3 * 2


def test_continued_pretraining_starts_at_its_sources_last_step(tmp_path):
    root = write_study(tmp_path, {})
    for run, steps, key in ((CLM, 20, "clm/loss"), (CPT, 6, "mlm40/loss")):
        (root / "pretrain" / run).mkdir(parents=True)
        (root / "pretrain" / run / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, key: 8 - s / 10}) + "\n" for s in range(2, steps + 1, 2)))
    report = Report(root)
    curves = report.loss_curves()
    assert [s for s, _ in curves[f"{CLM} (clm)"]] == list(range(2, 21, 2))
    assert [s for s, _ in curves[f"{CPT} (mlm40)"]] == [22, 24, 26]
    # in the data-efficiency figure the CPT line goes from its source's final model on, at global steps
    assert report.efficiency_series()[CLM] == {CLM: [(8, f"{CLM}-8"), (20, CLM)], CPT: [(20, CLM), (26, CPT)]}


def test_data_efficiency_bars_stay_in_the_metric_range_and_random_init_is_drawn(tmp_path):
    # a score of 1 with a wide interval: the bar must stop at 0, not claim negative scores
    levels = {CLM: flat(60.0), f"{CLM}-8": flat(1.0), CPT: flat(62.0), RANDOM: {**flat(30.0), "rt-polarity": 99.5}}
    root = write_study(tmp_path, levels, spread={f"{CLM}-8": 8.0, RANDOM: 2.0})
    report = Report(root)
    (lower, upper), = [_bounded_bars([c]) for _, _, c in report.efficiency_points("SC")[CLM][:1]]
    assert lower == [1.0] and upper[0] > 1.0
    # the random-init level is its score on the datasets every intermediate checkpoint was scored on
    assert report.random_reference("SC")[RANDOM].mean == 99.5
    assert _bounded_bars([report.random_reference("SC")[RANDOM]])[1][0] == 0.5
    fig, _ = report.efficiency_figure()
    rows = (root / "report" / "data_efficiency.csv").read_text().splitlines()
    assert fig == "data_efficiency.png" and any(r.startswith(f"{RANDOM} (random init),SC,0,99.5") for r in rows)


def test_finding_four_compares_a_split_with_the_mlm_model_when_no_zero_share_is_listed(tmp_path):
    root = write_study(tmp_path, {CLM: flat(50.0), MLM: flat(50.0), "micro-clm-5-mlm40-20": flat(60.0)})
    plan = json.loads((root / "plan.json").read_text())
    plan["runs"].append({"name": "micro-clm-5-mlm40-20", "size": "micro", "kind": "model", "steps": 20, "init": None,
                         "tokens_per_step": 4096,
                         "schedule": [["clm", 0], ["mlm40", 5]], "split_shares": {"clm-mlm40": 25.0}})
    plan["evaluations"].append({"label": "micro-clm-5-mlm40-20", "model": "micro-clm-5-mlm40-20", "step": 20,
                                "kind": "final", "size": "micro", "tag": "tag-micro-clm-5-mlm40-20"})
    write_json(root / "plan.json", plan)
    line = finding(findings(SimpleNamespace(res=StudyResults(root))), 4)
    assert f"(A = micro-clm-5-mlm40-20 (25% CLM), B = {MLM}): **reproduced**" in line, line


def test_a_question_the_study_does_not_ask_is_not_reported_as_a_missing_measurement(tmp_path):
    """The demo trains no split, no CPT of both models and no intermediate checkpoints of both: findings 2, 4 and 5
    say the study does not ask them; with the models planned but their records missing, "not measured" stays."""
    text = findings(SimpleNamespace(res=StudyResults(write_study(tmp_path / "asked", {CLM: flat(50.0)}))))
    for number, what in ((2, "intermediate checkpoints of both models"), (4, "CLM->MLM split"),
                         (5, "MLM continued pretraining of both models")):
        assert f"not asked by this study: it trains no {what}," in finding(text, number), finding(text, number)
    assert finding(text, 1).split(": ", 1)[1] == "not measured (missing evaluations)."  # MLM planned, no records


def test_finding_one_is_read_against_the_papers_early_phase_below_its_crossover_budget(tmp_path):
    """At 81,920 tokens a model is deep inside the phase where the paper's own CLM leads (until ~24B tokens), so
    'opposite' there is what the paper predicts, and the report says so; past that budget it says nothing."""
    root = write_study(tmp_path, {CLM: flat(60.0), MLM: flat(50.0)})
    line = finding(findings(SimpleNamespace(res=StudyResults(root))), 1)
    assert "**opposite**" in line and "this study's models saw 0.1M tokens, inside that early phase" in line, line
    plan = json.loads((root / "plan.json").read_text())
    for run in plan["runs"]:
        run["tokens_per_step"] = 2_000_000_000  # 20 steps: 40B tokens, past the paper's ~24B
    write_json(root / "plan.json", plan)
    assert "early phase" not in finding(findings(SimpleNamespace(res=StudyResults(root))), 1)


def test_a_cpt_arms_win_at_the_trivial_baseline_is_not_counted():
    from encoderlab.study.report_text import _higher
    from encoderlab.study.results import Comparison

    noise = Comparison("QA", 8.94, 4.94, 4.0, 3.5, 0.035, measurable=False)  # both at the first-span baseline
    win = Comparison("SC", 70.0, 60.0, 10.0, 4.0, 0.001)
    loss = Comparison("IR", 20.0, 30.0, -10.0, 4.0, 0.002)
    assert _higher([noise, win, loss]) == ("higher in 1/2 categories, significantly in 1, significantly lower in 1 "
                                           "(1 not measurable: each within its interval, or 5% of the headroom, of "
                                           "the trivial baseline)")


def test_the_reports_token_count_is_a_range_where_full_budget_windows_differ():
    from encoderlab.study.report_text import _tokens_seen

    run = {"init": None, "steps": 12, "tokens_per_step": 4096}
    plan = {"runs": [run, {**run, "tokens_per_step": 512},  # an imported architecture's own windows
                     {**run, "steps": 6}, {**run, "init": "x", "tokens_per_step": 1}, {**run, "imported": True}]}
    assert _tokens_seen(plan) == "between 6,144 and 49,152"
    assert _tokens_seen({"runs": [run]}) == "49,152"


def test_a_stability_test_without_a_p_value_is_inconclusive():
    """Runs that each sit as far from their median as the others (two scores, half each) leave Levene's test
    undefined (nan): no evidence either way, never 'opposite'."""
    from types import SimpleNamespace

    from encoderlab.study.paper_findings import _stability_finding

    runs = {"clm": [25.0, -25.0, 25.0, -25.0], "mlm": [-25.0, 25.0, -25.0, 25.0]}
    res = SimpleNamespace(tasks={m: {"t": SimpleNamespace(category="SC", centred_runs=r)} for m, r in runs.items()})
    text = _stability_finding(res, "clm", "mlm")
    assert "| SC | 28.87 | 28.87 | undefined (equal deviations) |" in text
    assert "| inconclusive at this scale |" in text and "| opposite |" not in text


def test_every_figure_title_fits_its_figure(tmp_path, monkeypatch):
    """A study of one category draws one narrow panel: the data-efficiency and stability titles, one line each,
    ran past both edges of the figure. They are wrapped to the figure's width (study/report.py `_wrap_title`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    one = ["rt-polarity"]
    labels = (RANDOM, CLM, MLM, CPT, f"{CLM}-8")
    root = write_study(tmp_path, {RANDOM: flat(30.0), CLM: flat(40.0), MLM: flat(45.0), CPT: flat(42.0),
                                  f"{CLM}-8": flat(35.0)}, tasks=dict.fromkeys(labels, one))
    for run, objective in ((CLM, "clm"), (MLM, "mlm40"), (CPT, "mlm40")):
        (root / "pretrain" / run).mkdir(parents=True)
        (root / "pretrain" / run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, f"{objective}/loss": 5 - s / 10}) + "\n" for s in range(1, 21)))
    drawn, close = [], plt.close
    monkeypatch.setattr(plt, "close", drawn.append)  # keep each figure to measure
    report = Report(root)
    report.out = tmp_path / "out"
    report.out.mkdir()
    assert report.efficiency_figure()[0] and report.stability_figure([CLM, MLM, CPT])[0] and report.loss_figure()
    assert len(drawn) == 3
    for fig in drawn:
        renderer = fig.canvas.get_renderer()
        titles = [fig._suptitle] if fig._suptitle else []
        titles += [ax.title for ax in fig.axes if ax.get_title()]
        for title in titles:
            box = title.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (title.get_text(), box, fig.bbox.width)
        close(fig)


def test_the_pooled_spread_counts_one_degree_of_freedom_less_per_dataset():
    """Runs centred on their own dataset's mean have N - k degrees of freedom for k datasets: the spread was
    divided by N - 1 (0.87 of its value for 3 datasets of 3 runs) and the detectable ratio read N - 1 too. Three
    datasets of one run each have none: no test."""
    import numpy as np
    from scipy import stats

    from encoderlab.study.compare import spread_tests

    rng = np.random.default_rng(0)
    raw = {m: [rng.normal(50, s, 3) for _ in range(3)] for m, s in (("clm", 2.0), ("mlm", 5.0))}
    centred = {m: [list(g - g.mean()) for g in gs] for m, gs in raw.items()}
    res = SimpleNamespace(tasks={m: {f"t{i}": SimpleNamespace(category="SC", centred_runs=g) for i, g in
                                     enumerate(gs)} for m, gs in centred.items()})
    (test,) = spread_tests(res, "clm", "mlm")
    within = {m: np.sqrt(sum(((g - g.mean()) ** 2).sum() for g in gs) / (9 - 3)) for m, gs in raw.items()}
    assert np.allclose((test.sd_a, test.sd_b), (within["clm"], within["mlm"]), rtol=1e-12)
    assert np.isclose(test.detectable_ratio, np.sqrt(stats.f.ppf(0.975, 6, 6) / stats.f.ppf(0.2, 6, 6)))
    one_run = {m: {f"t{i}": SimpleNamespace(category="SC", centred_runs=[0.0]) for i in range(3)} for m in raw}
    assert spread_tests(SimpleNamespace(tasks=one_run), "clm", "mlm") == []


def test_a_plan_without_its_totals_reports_without_them(tmp_path):
    """A plan.json that encoderlab did not write (by hand, or a test's) lacked `summary`: the report ended in a
    KeyError traceback at its last line. It now leaves the plan's totals out; one that has them shows them."""
    from encoderlab.study.report import write_report

    root = write_study(tmp_path, {CLM: flat(60.0), MLM: flat(55.0)})
    text = write_report(root).read_text()
    assert "## Protocol" in text and "Plan (steps and FLOPs)" not in text
    plan = json.loads((root / "plan.json").read_text())
    write_json(root / "plan.json", {**plan, "summary": {"steps": 40, "naive_steps": 60, "flops": 1e12,
                                                       "naive_flops": 2e12}})
    assert "Plan (steps and FLOPs): 40 steps trained (60 if every model were trained alone), 1e+12 FLOPs vs 2e+12." \
        in write_report(root).read_text()


def test_a_dataset_of_one_run_leaves_the_spread_test_unchanged():
    """A dataset of one run, centred on its own mean, is a 0 that says nothing about spread: it added nothing to the
    pooled spread but entered Levene's test (and the stability figure) as a run with no deviation at all."""
    import numpy as np

    from encoderlab.study.compare import dataset_runs, deviations, spread_tests

    rng = np.random.default_rng(1)
    centred = {m: [list(g - g.mean()) for g in (rng.normal(50, s, 4) for _ in range(2))] for m, s in
               (("clm", 2.0), ("mlm", 3.0))}

    def res(extra):
        return SimpleNamespace(tasks={m: {**{f"t{i}": SimpleNamespace(category="SC", centred_runs=g)
                                             for i, g in enumerate(gs)},
                                          **{f"one{i}": SimpleNamespace(category="SC", centred_runs=[0.0])
                                             for i in range(extra)}} for m, gs in centred.items()})

    assert spread_tests(res(5), "clm", "mlm") == spread_tests(res(0), "clm", "mlm")
    assert deviations(dataset_runs(res(5), "clm", "SC")) == [x for g in centred["clm"] for x in g]
