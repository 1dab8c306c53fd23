"""`mteb`'s tasks are task names: a wrong type was refused as `takes a text or a list of texts`, the words of
`embed`'s texts."""
from __future__ import annotations

import pytest

import encoderlab
from encoderlab.core.errors import EncoderlabError


@pytest.mark.parametrize("tasks", [3, [1, 2], None])
def test_mteb_refuses_tasks_of_another_type_as_task_names(tmp_path, tasks):
    with pytest.raises(EncoderlabError, match=r"^mteb: argument tasks=.*: takes a task name or a list of task names$"):
        encoderlab.mteb("minilm-l6", tasks, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_embed_still_takes_texts(tmp_path):
    with pytest.raises(EncoderlabError, match=r"takes a text or a list of texts$"):
        encoderlab.Encoder.embed(None, 3)
