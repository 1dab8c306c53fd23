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
