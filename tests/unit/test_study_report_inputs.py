"""A study report fed damaged or incomplete records: what it cannot use is named, never averaged into a verdict."""
from __future__ import annotations

import json
import math

from test_study_verdicts import CLM, MLM, flat, write_study

from encoderlab.study.report_text import _failed_and_missing
from encoderlab.study.results import StudyResults


def test_a_run_whose_shown_metric_is_not_finite_is_left_out_and_named(tmp_path):
    # the sweep fails a run whose protocol score is NaN, but not one whose standard metric alone is: such a run must
    # not turn a category mean, its interval and the finding's verdict into NaN ("opposite" from nothing)
    root = write_study(tmp_path, {CLM: flat(50.0), MLM: flat(50.0)})
    for path in (root / "evals").rglob("lr*.json"):
        record = json.loads(path.read_text())
        for split in ("validation", "test"):
            record["scores"][split]["standard"] = record["scores"][split]["score"]
        if f"tag-{MLM}" in str(path) and "conll-pos" in str(path) and path.name.endswith("seed1.json"):
            record["scores"]["test"]["standard"] = math.nan
        path.write_text(json.dumps(record))
    res = StudyResults(root, metric="standard")
    pos = res.tasks[MLM]["conll-pos"]
    assert math.isfinite(pos.test) and sorted(pos.by_seed) == [0, 2, 3, 4, 5, 6, 7]
    assert all(math.isfinite(c.a) and math.isfinite(c.b) for c in res.versus(MLM, CLM))
    text = _failed_and_missing(res, res.plan["protocol"])
    assert f"- {MLM} / conll-pos: 1 runs whose `standard` score is not a finite number (excluded)" in text, text


def test_a_planned_task_without_records_is_named_among_the_missing_runs(tmp_path):
    # MLM ran three of its four planned tasks: its TC is then absent, which the report must say, not leave out
    root = write_study(tmp_path, {CLM: flat(50.0), MLM: flat(50.0)},
                       tasks={MLM: ["rt-polarity", "wiki-cloze", "wiki-title"]})
    plan = json.loads((root / "plan.json").read_text())
    for e in plan["evaluations"]:
        e["tasks"] = ["rt-polarity", "conll-pos", "wiki-cloze", "wiki-title"]
    (root / "plan.json").write_text(json.dumps(plan))
    res = StudyResults(root)
    text = _failed_and_missing(res, res.plan["protocol"])
    assert f"- {MLM} / conll-pos: no records (planned; `study run` does them)" in text, text
    assert f"{CLM} / conll-pos" not in text
    assert "micro-random: no evaluation records yet" in text and "micro-random / " not in text
