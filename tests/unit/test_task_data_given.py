"""A task's data file or folder given where a task goes (`sweep CKPT train.csv`, a BEIR folder) was an unknown task
name, with the list of known names: it is named as data, with what a task file is."""
from __future__ import annotations

import pytest

from encoderlab.core.errors import DataError
from encoderlab.tasks import task_identity


@pytest.mark.parametrize("given, what", [("train.csv", "a file"), ("beir", "a folder")])
def test_a_data_file_or_folder_given_as_a_task_is_named_as_data(tmp_path, monkeypatch, given, what):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.csv").write_text("text,label\na,pos\n")
    (tmp_path / "beir").mkdir()
    with pytest.raises(DataError, match=rf"^task {given!r}: {tmp_path}/{given} is {what} of data, not a task: give "
                                        r"a task YAML file that names it \(family, train, validation, \.\.\.: "
                                        r"docs/evaluation\.md#tasks\), an offline task or a paper dataset$"):
        task_identity(given)
