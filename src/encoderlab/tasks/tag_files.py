"""The tag names of a token task given as files (a CoNLL-schema folder's `labels.json` or `labels.txt`): tag i of
the data is the name of id i, so each tag must have one name and one id, or every tag after a slip would be read as
another."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from encoderlab.core.errors import DataError, listed, short
from encoderlab.core.io import read_unique_json, text_lines
from encoderlab.core.unique_names import repeated


def tag_names_file(folder: Path) -> list[str] | None:
    """The tag names of a `labels.json` (a list in id order, or an object {tag: id}) or `labels.txt` (one a line)
    beside a task's files, each named once; None where there is neither."""
    for name in ("labels.json", "label.json"):
        if (folder / name).exists():
            return _tag_names(folder / name, read_unique_json(folder / name))
    if (folder / "labels.txt").exists():
        return _tag_names(folder / "labels.txt", [line.strip() for line in text_lines(folder / "labels.txt")
                                                  if line.strip()])
    return None


def _tag_names(path: Path, data: Any) -> list[str]:
    """The names of a tag file's value in id order, refused in one line unless each tag has one name and one id."""
    if isinstance(data, dict):
        ids = list(data.values())
        if sorted(i for i in ids if type(i) is int) != list(range(len(ids))):  # a bool is no id
            raise DataError(f"{path}: the ids of an object {{tag: id}} must be 0 to {len(ids) - 1}, each once "
                            f"(got {listed(ids)}): tag i of the data is the tag of id i")
        return sorted(data, key=data.get)
    if not isinstance(data, list):
        raise DataError(f"{path}: give a list of tag names in id order or an object {{tag: id}} (got a "
                        f"{type(data).__name__})")
    for i, tag in enumerate(data, 1):
        if not isinstance(tag, str | int) or isinstance(tag, bool):
            raise DataError(f"{path}: tag {i} is {listed([tag])[1:-1]}, not a name: give each tag's name as text")
    names = [str(tag) for tag in data]
    if (twice := repeated(names)) is not None:
        raise DataError(f"{path}: the tag {short(twice, 60)} is listed twice: each tag's name once, in id order")
    return names
