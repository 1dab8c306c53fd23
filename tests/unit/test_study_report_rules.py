"""Every verdict of a report follows its printed rule: the sanity check's word agrees with its interval in every cell
of reports generated from synthetic records, and two models at the trivial baseline read "at baseline", never a
hidden "no"."""
from __future__ import annotations

import csv
import re

from test_study_verdicts import CLM, CPT, MLM, RANDOM, TASKS, flat, write_study

from encoderlab.core.io import read_json, write_json
from encoderlab.study.report import write_report as _write_report
from encoderlab.study.results import StudyResults, at_baseline
from encoderlab.study.sanity import RULE

CELL = re.compile(r"^(\*\*yes\*\*|no|at baseline): ([+-]\d+\.\d+)(?: ± (\S+) \(p \S+\)|, undefined.*)$")


def write_report(root):
    """The whole report.md, with the plan's step and FLOPs summary a real plan has."""
    plan = read_json(root / "plan.json", "written by write_study")
    plan["summary"] = {"steps": 46, "naive_steps": 66, "flops": 1e12, "naive_flops": 2e12}
    write_json(root / "plan.json", plan)
    return _write_report(root)


def studies(tmp_path):
    """Reports over a spread of cases: clear wins, losses, noise, both sides at the baseline, one seed's worth of
    noise against a large gap, and too few datasets on the random-init side."""
    yield write_study(tmp_path / "wide", {RANDOM: flat(30.0), CLM: flat(40.0), MLM: {"SC": 40.0, "TC": 31.0,
                                                                                     "QA": 29.0, "IR": 20.0},
                                          CPT: flat(30.5)})
    yield write_study(tmp_path / "noisy", {RANDOM: flat(30.0), CLM: flat(33.0), MLM: flat(31.0), CPT: flat(28.0)},
                      spread={RANDOM: 3.0, CLM: 3.0, MLM: 0.5, CPT: 5.0})
    yield write_study(tmp_path / "baseline", {RANDOM: flat(0.5), CLM: {**flat(3.1), "SC": 60.0}, MLM: flat(0.9),
                                              CPT: flat(2.0)},
                      spread={RANDOM: 0.05, CLM: 0.05, MLM: 0.05, CPT: 0.05}, baseline=flat(0.44))
    yield write_study(tmp_path / "fewer", {RANDOM: flat(30.0), CLM: flat(45.0), MLM: flat(30.2), CPT: flat(35.0)},
                      tasks={RANDOM: ["rt-polarity", "wiki-title"], CLM: list(TASKS), MLM: list(TASKS),
                             CPT: list(TASKS)})


def test_every_sanity_cell_agrees_with_its_interval_under_the_printed_rule(tmp_path):
    seen = set()
    for root in studies(tmp_path):
        text = write_report(root).read_text()
        section = text.split("## Sanity check")[1].split("\n## ")[0]
        assert RULE in section
        res = StudyResults(root)
        rows = [line.strip("| ").split(" | ") for line in section.splitlines() if line.startswith("| micro")]
        with (root / "report" / "sanity.csv").open() as f:
            outcome = {(r["model"], r["category"]): r["outcome"] for r in csv.DictReader(f)}
        for model, *cells, verdict in rows:
            for cat, cell in zip(("SC", "TC", "QA", "IR"), cells):
                if cell == "-":
                    continue
                word, diff, ci = CELL.match(cell).groups()
                word = word.strip("*")
                seen.add(word)
                assert outcome[model, cat] == word  # the CSV says what the table says
                common = set(res.tasks[model]) & set(res.tasks[RANDOM])
                both = [res.categories_of(lb, common)[cat] for lb in (model, RANDOM)]
                if word == "at baseline":
                    assert all(at_baseline(c) for c in both), (root, model, cat)
                    continue
                assert not all(at_baseline(c) for c in both), (root, model, cat)
                above = ci not in (None, "-") and float(diff) - float(ci) > 0
                assert (word == "yes") == above, (root, model, cat, cell)
            assert verdict.startswith(f"holds in {sum(c.startswith('**yes**') for c in cells)}/")
    assert seen == {"yes", "no", "at baseline"}  # the cases reach every outcome


def test_an_interval_above_zero_at_the_baseline_reads_at_baseline_not_no(tmp_path):
    # retrieval at 3.1 against random init's 0.5, a random ranking at 0.44: a clear difference of two scores at the
    # trivial baseline's level is printed as such, and neither holds nor counts as failing silently
    root = write_study(tmp_path, {RANDOM: flat(0.5), CLM: flat(3.1)}, spread={RANDOM: 0.05, CLM: 0.05},
                       baseline=flat(0.44), tasks={RANDOM: list(TASKS), CLM: list(TASKS)})
    section = write_report(root).read_text().split("## Sanity check")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith(f"| {CLM} |"))
    assert row.count("at baseline: +2.60 ± ") == 4 and "holds in 0/4 categories, at baseline in 4" in row, row
    with (root / "report" / "sanity.csv").open() as f:
        assert {(r["outcome"], r["holds"]) for r in csv.DictReader(f)} == {("at baseline", "False")}


def held_out(root):
    """Two models on a QA task where 5 of 8 kept runs answer "no answer" to every question (the rest learned a
    little), a learned QA task, and a retrieval task both fail against BM25 (80 against 5)."""
    from encoderlab.finetuning import records
    from test_study_verdicts import PROTOCOL

    write_study(root, {}, tasks={})
    key = records.protocol_key(PROTOCOL)
    for lb, level in ((CLM, 0.0), (MLM, 1.0)):
        for task, family, base in (("qa-abstain", "qa", {"first_span": 10.0, "always_abstain": 30.4}),
                                   ("qa-learned", "qa", {"first_span": 10.0}),
                                   ("ir-held-out", "retrieval", {"random": 0.4, "bm25": 80.0, "bm25_full_text": 85.0})):
            for seed in PROTOCOL["seeds"]:
                constant = task == "qa-abstain" and seed < 5
                score = {"qa-abstain": 30.4 if constant else 40.0 + seed, "qa-learned": 60.0 + seed + level,
                         "ir-held-out": 5.0 + seed / 2 + level}[task]
                records.write(records.record_path(root / "evals", f"tag-{lb}", key, task, "0" * 16, 0.001, seed), {
                    "tag": f"tag-{lb}", "task": task, "family": family, "metric": "f1", "status": "ok",
                    "fingerprint": "0" * 16, "protocol": PROTOCOL, "lr": 0.001, "seed": seed,
                    "baseline": {s: {"score": min(base.values())} for s in ("validation", "test")},
                    "baselines": {s: {n: {"score": v} for n, v in base.items()} for s in ("validation", "test")},
                    "constant_predictions": {"test": "no answer" if constant else None},
                    "max_length": 64, "truncated": {"train": 176, "validation": 0, "test": 12, "unit": "examples"},
                    "truncation_totals": {"train": 500, "validation": 100, "test": 100},
                    "answers_lost": {"train": 150, "validation": 0, "test": 9} if family == "qa" else None,
                    "scores": {"validation": {"score": score}, "test": {"score": score}}})
    return root


def test_a_mostly_constant_task_is_flagged_and_no_model_beats_bm25(tmp_path):
    root = held_out(tmp_path)
    text = write_report(root).read_text()
    res = StudyResults(root)
    qa = res.categories[CLM]["QA"]
    assert qa.mostly_constant == ["qa-abstain: no answer in 5 of 8 kept runs"] and not qa.constant
    table = text.split("### Final models")[1].split("\n### ")[0].split("\n## ")[0]
    row = next(line for line in table.splitlines() if line.startswith(f"| {CLM} |"))
    without = qa.without_constant
    assert f"{qa.mean:.2f} ± {qa.ci95:.2f} †; without them: {without.mean:.2f} ± {without.ci95:.2f}" in row, row
    assert without.mean == 63.5 and without.datasets == 1  # qa-learned alone
    assert f"- {CLM} / QA: qa-abstain: no answer in 5 of 8 kept runs" in table
    # every model far under BM25: the category table and the finding both say that no model beats it
    assert "- IR, strongest baseline BM25 (80.00): no model beats it: " in table, table
    assert "(above it on 0 of 1 datasets)" in table
    line = text.split("**1. ")[1].split("\n")[0]
    assert "against the strongest baseline (BM25) in IR: no model beats it" in line, line
    assert "no model beats it" not in line.split("in IR")[0].split("QA")[-1]  # QA's learned task is above its own
    datasets = text.split("## Per-dataset scores")[1]
    assert "vs BM25" in datasets  # the dataset table names the gap too
    # and marks the mostly-constant task's cell as the category table does, saying why under the table
    row = next(line for line in datasets.splitlines() if line.startswith(f"| {CLM} | "))
    assert "(lr 0.001; +5.85 vs always abstain †) | " in row and row.count("†") == 1, row  # qa-learned unmarked
    assert f"†: more than half of the model's kept runs predict one thing on test, so its score there is no evidence " \
           f"of learning: {CLM} / qa-abstain: no answer in 5 of 8 kept runs" in datasets


def test_the_report_says_what_truncation_cut_and_which_answers_it_lost(tmp_path):
    text = write_report(held_out(tmp_path / "held-out")).read_text()
    section = text.split("## Input coverage (truncation)")[1].split("\n## ")[0]
    assert ("| qa-abstain | 64 | examples | train 176 of 500 (35.2%); validation 0 of 100 (0.0%); test 12 of 100 "
            "(12.0%) | train 150; validation 0; test 9 |") in section, section
    assert "| ir-held-out | 64 | examples | train 176 of 500 (35.2%)" in section and section.count("| - |") == 1
    # records from before the sweep kept these counts read as such, never as "nothing cut"
    old = write_report(write_study(tmp_path / "old", {CLM: flat(40.0)})).read_text()
    assert "| rt-polarity | - | - | not recorded | not recorded |" in old


def test_a_baseline_that_differs_by_tokenizer_is_given_per_model():
    """TF-IDF + LR reads the text each model's tokenizer keeps within max_length: the notes gave the first model's
    value as the category's, beside gaps measured from each model's own."""
    from encoderlab.study.intervals import CategoryScore, Spread
    from encoderlab.study.standing import lexical_lines

    def score(mean: float, lexical: float) -> CategoryScore:
        return CategoryScore(mean, 1.0, Spread(((1.0, 2),)), 1, lexical=lexical, lexical_names="TF-IDF + LR")

    differ = lexical_lines({"a": {"SC": score(50.0, 70.0)}, "b": {"SC": score(67.5, 71.67)}}, ["SC"])
    assert differ == ["- SC, strongest baseline TF-IDF + LR (per model's tokenizer): no model beats it: a -20.00 "
                      "(above it on 0 of 1 datasets; it is 70.00 for this model), b -4.17 (above it on 0 of 1 "
                      "datasets; it is 71.67 for this model)"]
    same = lexical_lines({"a": {"SC": score(50.0, 70.0)}, "b": {"SC": score(75.0, 70.0)}}, ["SC"])
    assert same == ["- SC, strongest baseline TF-IDF + LR (70.00): a -20.00 (above it on 0 of 1 datasets), b +5.00 "
                    "(above it on 0 of 1 datasets)"]


def test_a_dataset_tables_baseline_row_names_the_models_of_each_value():
    from types import SimpleNamespace

    from encoderlab.study.report import Report

    report = Report.__new__(Report)
    entry = {"a": {"tfidf": 70.0, "majority": 50.0}, "b": {"tfidf": 70.0, "majority": 50.0},
             "c": {"tfidf": 71.666, "majority": 50.0}}
    report.res = SimpleNamespace(tasks={lb: {"t": SimpleNamespace(summary={"baselines": values})}
                                        for lb, values in entry.items()})
    assert report._baseline_cell(["a", "b", "c"], "t", "tfidf") == "70.00 (a, b); 71.67 (c)"
    assert report._baseline_cell(["a", "b", "c"], "t", "majority") == "50.00"


def test_a_per_model_baseline_cell_with_a_dash_is_explained_under_the_table(tmp_path):
    """Where TF-IDF + LR differs by tokenizer, a model whose records hold no such baseline shows "-" inside the
    per-model cell ("70.00 (CLM); - (MLM)"): the note saying what "-" means was given for whole "-" cells only."""
    import json

    from encoderlab.study.report import Report

    root = write_study(tmp_path, {CLM: flat(40.0), MLM: flat(45.0)}, tasks={CLM: ["rt-polarity"],
                                                                            MLM: ["rt-polarity"]})
    for path in (root / "evals").rglob("*.json"):
        record = json.loads(path.read_text())
        if record.get("tag") == f"tag-{CLM}":
            record["baselines"] = {"test": {"tfidf_logreg": {"score": 70.0}, "tfidf_logreg_full_text": {"score": 72.0}}}
            path.write_text(json.dumps(record))
    report = Report(root)
    report.out = tmp_path / "out"
    report.out.mkdir()
    tables = report.dataset_tables([CLM, MLM])
    row = next(line for line in tables.splitlines() if line.startswith("| *baseline: TF-IDF + LR*"))
    assert row == f"| *baseline: TF-IDF + LR* | 70.00 ({CLM}); - ({MLM}) |"
    assert tables.count('"-": not in the records') == 1
    assert tables.count('has "-" for a model whose records hold no such baseline') == 1  # once, under the tables
