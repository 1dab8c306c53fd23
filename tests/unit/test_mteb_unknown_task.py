"""An unknown `encoderlab mteb` task is refused naming the offline tasks MTEB can score (not the tokens or QA tasks
it would refuse next), and an MTEB task's name given in other letter case is named as mteb spells it."""
from __future__ import annotations

import json

import pytest

from encoderlab.core.errors import EncoderlabError
from encoderlab.hub.mteb_eval import check_task

pytest.importorskip("mteb", reason="the mteb extra is not installed (pip install 'encoderlab[mteb]')")


@pytest.fixture
def root(tmp_path):
    for name, family in (("tiny-cls", "classification"), ("tiny-ner", "tokens")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.json").write_text(json.dumps({"name": name, "family": family}))
        for split in ("train", "validation", "test"):
            (tmp_path / name / f"{split}.jsonl").write_text("")
    return tmp_path


def test_an_unknown_task_lists_only_the_offline_tasks_mteb_scores(root):
    with pytest.raises(EncoderlabError) as caught:
        check_task("NoSuchTask", root)
    said = str(caught.value)
    assert "unknown task 'NoSuchTask'" in said and "(tiny-cls)" in said and "tiny-ner" not in said


def test_an_mteb_name_in_other_case_is_named_as_mteb_spells_it(root):
    with pytest.raises(EncoderlabError, match=r"unknown task 'scifact'.*did you mean 'SciFact'\?"):
        check_task("scifact", root)
