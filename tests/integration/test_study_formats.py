"""A study folder written before formats had versions is reused as it is: its checkpoints, records and plan read
through their migrations, no job runs again and the report reads the same scores."""
from __future__ import annotations

import json

from encoderlab.core import formats
from encoderlab.runs import checkpoint
from encoderlab.study.report import write_report
from encoderlab.study.results import StudyResults
from encoderlab.study.runner import run_study
from tests.integration.test_study import plan_of, scores, task_yaml, write_study  # noqa: F401


def unversioned(file) -> None:
    """`file` as the writers before formats had versions wrote it: no format_version, in it or in its protocol."""
    data = json.loads(file.read_text())
    data.pop(formats.FIELD)
    if isinstance(data.get("protocol"), dict):
        data["protocol"].pop(formats.FIELD)
    file.write_text(json.dumps(data))


def test_a_study_folder_of_unversioned_formats_is_reused_whole(tmp_path, packed_dir, task_yaml, one_thread):  # noqa: F811
    plan, base = plan_of(write_study(tmp_path, str(packed_dir), task=str(task_yaml)))
    first = run_study(plan, base, log=lambda m: None)
    assert not first["failed"] and first["done_now"] == first["jobs"]
    made, report = scores(plan.root), StudyResults(plan.root).categories
    for state in plan.root.glob("pretrain/*/checkpoints/*/state.json"):
        unversioned(state)
        checkpoint.write_manifest(state.parent)  # the checksums of the folder as it was written
    written = sorted(plan.root.glob("evals/*/*/*/*/lr*.json"))
    assert len(written) == len(made) == 2 * 2 * 2  # two models x two LRs x two seeds
    for file in [*written, plan.root / "plan.json"]:
        unversioned(file)
    assert StudyResults(plan.root).categories == report
    again = run_study(plan, base, log=lambda m: None)
    assert not again["failed"] and again["done_now"] == 0 and again["done"] == again["jobs"]
    assert scores(plan.root) == made
    assert all(formats.FIELD not in json.loads(f.read_text()) for f in written)  # reused, not written again
    assert "micro-clm-20" in write_report(plan.root).read_text()
