"""`enc.embed(df["text"])` or `enc.embed(np.array(texts))`, what a pandas or numpy user passes for texts, was refused
(`takes a text or a list of texts`): a 1-d array or Series of texts is now the list it holds, as a numpy number is
the Python one."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from encoderlab.core.arguments import Log, checked
from encoderlab.core.errors import EncoderlabError


@checked
def embed(texts: list[str] | str, log: Log = print) -> list[str]:
    return [texts] if isinstance(texts, str) else texts


@pytest.mark.parametrize("texts", [np.array(["a", "b c"]), pd.Series(["a", "b c"]),
                                   np.array(["a", "b c"], dtype=object), pd.Series(["x", "a", "b c"]).iloc[1:]])
def test_a_1d_array_or_series_of_texts_is_their_list(texts):
    assert embed(texts) == ["a", "b c"] and type(embed(texts)) is list


@pytest.mark.parametrize("texts", [np.array([["a", "b"]]), np.array([1, 2]), pd.Series([1, 2]),
                                   np.array(["a", 1], dtype=object)])
def test_arrays_of_other_things_are_still_refused(texts):
    with pytest.raises(EncoderlabError, match=r"^embed: argument texts=.*: "):
        embed(texts)
