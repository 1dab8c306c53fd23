"""A study's MTEB job (study/jobs.py `MtebJob`) is done when its summary holds these weights' scores of the study
file's `evaluation.mteb` tasks: the same tasks in another order are the same list, a task added or dropped is not."""
from __future__ import annotations

import json

from conftest import tiny_checkpoint

from encoderlab.runs.encoders import encoder_digest
from encoderlab.study.jobs import MtebJob


def test_an_mteb_job_is_done_for_its_tasks_in_any_order(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "mteb" / "m"
    out.mkdir(parents=True)
    rows = [{"task": t, "score": 1.0} for t in ("tiny-ir", "tiny-sc")]
    (out / "summary.json").write_text(json.dumps({"weights": encoder_digest(checkpoint), "tasks": rows}))

    def done(tasks: list[str]) -> bool:
        return MtebJob(id="mteb:m", deps=[], checkpoint=checkpoint, tasks=tasks, out=out).is_done()

    assert done(["tiny-ir", "tiny-sc"]) and done(["tiny-sc", "tiny-ir"])  # reordered in the study file
    assert done(["tiny-sc", "tiny-ir", "tiny-sc"])  # a task named twice is scored once
    assert not done(["tiny-sc"]) and not done(["tiny-ir", "tiny-sc", "tiny-qa"])  # removed, added
    assert not done(["tiny-ir", "tiny-qa"])  # one replaced: as many tasks, another list
