"""io.py: files are replaced whole or not at all, and a failed write leaves nothing behind."""
from __future__ import annotations

import pytest

from encoderlab.io import atomic_file, read_jsonl, write_json, write_jsonl


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    write_json(path, {"x": 1})
    with pytest.raises(RuntimeError), atomic_file(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == '{\n  "x": 1\n}\n' and list(tmp_path.iterdir()) == [path]


def test_json_lines_round_trip_and_count(tmp_path):
    assert write_jsonl(tmp_path / "b.jsonl", iter([{"a": 1}, {"a": 2}])) == 2
    assert list(read_jsonl(tmp_path / "b.jsonl")) == [{"a": 1}, {"a": 2}]
    assert write_jsonl(tmp_path / "c.jsonl", iter([])) == 0


def test_a_bad_json_line_names_the_file_and_line(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(Exception, match=r"d\.jsonl:3: not valid JSON"):
        list(read_jsonl(tmp_path / "d.jsonl"))
    (tmp_path / "e.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(Exception, match=r"e\.jsonl:1: missing b"):
        list(read_jsonl(tmp_path / "e.jsonl", required=("b",)))
