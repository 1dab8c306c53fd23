"""The one check of names given twice: a header's columns, a JSON text's keys (core/unique_names.py)."""
from __future__ import annotations

import json

import pytest

from encoderlab.core.unique_names import RepeatedKey, loads, repeated

VALID = ['{"a": 1, "b": [1, {"a": 2}], "c": {"a": {"a": null}}}', '[{"x": 1}, {"x": 2}]', '"text"', "3.5e2",
         '{"": 1, "\\u00e9": "\\ud83d\\ude00"}', "NaN", '  {"a": true}  ']


@pytest.mark.parametrize("text", VALID)
def test_json_without_a_key_given_twice_reads_as_json_reads_it(text):
    assert repr(loads(text)) == repr(json.loads(text))


def test_what_is_not_json_fails_as_json_fails():
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        loads('{"a": }')


def test_a_key_given_twice_is_located_at_the_innermost_object_that_gives_it():
    text = '{\n  "a": 1,\n  "b": [\n    {"k": 1, "k": 2}\n  ],\n  "a": 3\n}'
    with pytest.raises(RepeatedKey) as found:
        loads(text)
    assert (found.value.key, found.value.line, found.value.column) == ("k", 4, 5)
    assert "the key 'k' is given twice in one object; keys must be unique in an object" in str(found.value)


def test_repeated_names_only_those_asked_for():
    assert repeated(["text", "", "", "text"]) == ""
    assert repeated(["text", "", "", "text"], among=["text"]) == "text"
    assert repeated(["text", "", ""], among=["text"]) is None


def test_a_long_name_given_twice_is_shown_cut_to_one_readable_line(tmp_path):
    """A key or column of 200,000 characters given twice made a refusal of 200,000 characters: one line, but no
    reader's. The name is cut as `listed` cuts values, in every reader's message."""
    from encoderlab.core.errors import DataError
    from encoderlab.core.io import read_jsonl, read_unique_json
    from encoderlab.data.sources import iter_documents
    from encoderlab.tasks.common import _read_csv
    from encoderlab.tasks.qa_loaders import _read_squad_json

    long = "k" * 200_000
    (tmp_path / "rows.jsonl").write_text(f'{{"text": "a b", "{long}": 1, "{long}": 2}}\n')
    (tmp_path / "rows.json").write_text(f'{{"{long}": 1, "{long}": 2}}')
    (tmp_path / "rows.csv").write_text(f"{long},text,{long}\nx,y,z\n")
    (tmp_path / "dup.csv").write_text(f"text,{long},text\nx,y,z\n")
    calls = [lambda: list(read_jsonl(tmp_path / "rows.jsonl")), lambda: read_unique_json(tmp_path / "rows.json"),
             lambda: _read_squad_json(str(tmp_path / "rows.json")),
             lambda: list(iter_documents(str(tmp_path / "rows.jsonl"))), lambda: _read_csv(tmp_path / "rows.csv"),
             lambda: list(iter_documents(str(tmp_path / "dup.csv")))]
    for call in calls:
        with pytest.raises(DataError) as caught:
            call()
        said = str(caught.value)
        assert len(said) < 400 and "twice" in said, said[:300]
