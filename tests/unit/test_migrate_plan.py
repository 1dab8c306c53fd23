"""A study's plan.json read through study/migrate_plan.py: one written before formats had versions (its protocol
from before `lr_choice` and the other settings added since) reads as the report read it then, a newer format is
refused in one line, the current one round-trips."""
from __future__ import annotations

import pytest

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_json
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.study import migrate_plan
from encoderlab.study.results import StudyResults

OLD_PROTOCOL = {"name": "t", "lrs": [1e-5], "seeds": [0], "max_steps": 4}
EVALUATION = {"label": "m", "model": "m", "step": 1, "kind": "final", "size": "x", "tag": "tag-m"}


def test_a_plan_of_format_0_reads_under_the_rules_of_its_time(tmp_path):
    write_json(tmp_path / "plan.json", {"study": "s", "budget": 1, "protocol": OLD_PROTOCOL, "runs": [],
                                        "evaluations": [EVALUATION]})
    plan = migrate_plan.read(tmp_path)
    assert plan["format_version"] == migrate_plan.FORMAT
    assert plan["protocol"]["lr_choice"] == "mean_over_seeds" and plan["protocol"]["inputs"] == "bos_eos"
    assert plan["spec"] == {"findings": "paper", "comparisons": []}  # reported with the paper's findings, as then
    results = StudyResults(tmp_path)
    assert results.lr_choice == "mean_over_seeds"
    assert results.protocol_key == records.protocol_key(OLD_PROTOCOL)  # where its records were filed


def test_a_current_plan_round_trips_and_a_newer_one_is_refused(tmp_path):
    protocol = Protocol(name="t", lr_choice="per_seed").model_dump(mode="json")
    plan = {"format_version": migrate_plan.FORMAT, "study": "s", "budget": 1, "protocol": protocol, "runs": [],
            "evaluations": [EVALUATION]}
    write_json(tmp_path / "plan.json", plan)
    assert migrate_plan.read(tmp_path) == plan
    assert StudyResults(tmp_path).lr_choice == "per_seed"
    write_json(tmp_path / "plan.json", {**plan, "format_version": 2})
    with pytest.raises(EncoderlabError, match=rf"^{tmp_path / 'plan.json'} has format_version 2, newer than 1, "):
        migrate_plan.read(tmp_path)
    write_json(tmp_path / "plan.json", {**plan, "protocol": {**protocol, "format_version": 5}})
    with pytest.raises(EncoderlabError, match=r"plan.json \(its protocol\) has format_version 5, newer than 1"):
        StudyResults(tmp_path)
