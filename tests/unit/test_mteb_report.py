"""The study report's MTEB section says which model's score is within chance of its trivial baseline, as the `mteb`
command does under its table; the section showed the number alone."""
from __future__ import annotations

import json

from encoderlab.study.mteb_report import mteb_section


def summary(score: float, warning: str | None) -> dict:
    row = {"task": "rt-polarity", "metric": "accuracy", "score": score, "baselines": {"majority class": 50.0}}
    return {"mteb_version": "2.0", "tasks": [dict(row, warning=warning) if warning else row]}


def test_a_score_at_chance_is_named_under_the_table(tmp_path):
    at_chance = "learned nothing: within chance of the majority class (50.00; its 95% bound over 852 test " \
                "examples is 52.82)"
    for label, s in (("micro-mlm", summary(50.14, at_chance)), ("minilm", summary(59.25, None))):
        (tmp_path / "mteb" / label).mkdir(parents=True)
        (tmp_path / "mteb" / label / "summary.json").write_text(json.dumps(s))
    text = mteb_section(tmp_path, ["micro-mlm", "minilm"], ["rt-polarity"])
    assert "| micro-mlm | 50.14 |" in text and "| minilm | 59.25 |" in text
    assert text.endswith("No evidence of learning (the score is within chance of its trivial baseline):\n"
                         f"- micro-mlm / rt-polarity: {at_chance}\n")
    assert "No evidence" not in mteb_section(tmp_path, ["minilm"], ["rt-polarity"])
