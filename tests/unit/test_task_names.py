"""A task name that reads no task: one of the offline suite's tasks not prepared yet is said to be that, with the
command that prepares it; any other name is unknown, with the closest known name where one is close."""
from __future__ import annotations

import pytest

from encoderlab.core.errors import DataError, EncoderlabError
from encoderlab.data.offline import SUITE_TASKS
from encoderlab.tasks import load_task, offline_root, task_family, task_identity


def test_an_offline_suite_task_not_prepared_names_the_command_that_prepares_it(tmp_path):
    """None of the suite prepared (the session's own empty home), or a suite prepared without this task (one built
    elsewhere by --out, given as the root): every entry point says so, naming the folder it looked in."""
    assert len(SUITE_TASKS) == 12 and {"wiki-topic", "imdb-long", "conll-cloze"} <= set(SUITE_TASKS)
    said = (f"task 'wiki-topic' is one of the offline suite's tasks, not prepared under {offline_root()}: prepare "
            "the suite with `encoderlab data prepare offline`")
    for check in (task_identity, task_family, load_task):
        with pytest.raises(DataError) as refused:
            check("wiki-topic")
        assert str(refused.value) == said
    root = tmp_path / "suite" / "tasks"
    (root / "rt-polarity").mkdir(parents=True)
    (root / "rt-polarity" / "task.json").write_text('{"name": "rt-polarity", "family": "classification"}')
    with pytest.raises(DataError) as refused:
        task_identity("imdb-long", root=root)
    assert str(refused.value) == (f"task 'imdb-long' is one of the offline suite's tasks, not prepared under {root}: "
                                  f"prepare the suite with `encoderlab data prepare offline --out {root.parent}`")


def test_mteb_says_an_offline_suite_task_is_not_prepared():
    from encoderlab.hub.mteb_eval import check_task

    with pytest.raises(EncoderlabError, match=r"^task 'wiki-title' is one of the offline suite's tasks, not "
                                              r"prepared under .*: prepare the suite with `encoderlab data prepare "
                                              r"offline`$"):
        check_task("wiki-title", offline_root())


@pytest.mark.parametrize("name, guess", [("sst3", "sst2"), ("wiki-topik", "wiki-topic"), ("conll2002", "conll2003"),
                                         ("no-such-task", None)])
def test_an_unknown_name_is_refused_with_the_closest_known_one(name, guess):
    with pytest.raises(DataError) as refused:
        task_identity(name)
    said = str(refused.value)
    start = f"unknown task {name!r}" + (f" (did you mean {guess!r}?)" if guess else "")
    assert said.startswith(f"{start}; known: none offline (`encoderlab data prepare offline`); paper: sst2, "), said
    assert said.endswith("; or a task YAML file")


def test_a_missing_task_file_named_after_an_offline_suite_task_says_so(tmp_path):
    with pytest.raises(DataError, match=r"task file not found: .*wiki-topic\.yaml; 'wiki-topic', without \.yaml, "
                                        "is the offline task of that name"):
        task_identity(str(tmp_path / "wiki-topic.yaml"))
