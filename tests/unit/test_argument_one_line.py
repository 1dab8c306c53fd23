"""A refused argument whose repr spans lines (a pandas Series, a 2-d array) made the refusal several lines, the
argument's rows among them, where a refusal is one line."""
from __future__ import annotations

import numpy as np
import pytest

import encoderlab
from encoderlab.core.errors import EncoderlabError


@pytest.mark.parametrize("value", [np.array([["a", "b"], ["c", "d"]]), np.zeros((3, 3))])
def test_a_refused_argument_of_many_lines_is_shown_on_one(tmp_path, value):
    with pytest.raises(EncoderlabError) as refused:
        encoderlab.prepare_data(tmp_path / "c.txt", tmp_path / "d", vocab_size=value)
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("prepare_data: argument vocab_size=array([[")


def test_an_unknown_argument_of_many_lines_is_shown_on_one(tmp_path):
    with pytest.raises(EncoderlabError) as refused:
        encoderlab.prepare_data(tmp_path / "c.txt", tmp_path / "d", vocab=np.zeros((3, 3)))
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("prepare_data: unexpected argument vocab=array([[0., 0., 0.], [0.")
