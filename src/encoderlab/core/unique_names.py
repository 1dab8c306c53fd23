"""Names a file must give once: a table's columns and a JSON object's keys.

Readers keep one of two same-named fields without a word: `csv.DictReader` and `json` the last, `header.index` and
pyarrow the first. Which text a corpus holds or which label a task trains on would then depend on a writer's bug, so
every reader of user data refuses a name given twice, through the two checks here, in one wording: a header's
(`check_header`) and a JSON text's (`loads`, which json's own `object_pairs_hook` makes cost little).
"""
from __future__ import annotations

import contextlib
import json
import json.decoder
import json.scanner
from collections.abc import Iterable
from typing import Any

from encoderlab.core.errors import DataError, short

UNIQUE_COLUMNS = "column names must be unique: rename one"
UNIQUE_KEYS = "keys must be unique in an object: remove or rename one"


def repeated(names: Iterable[Any], among: Iterable[Any] | None = None) -> Any | None:
    """The first name that `names` holds twice (only those in `among`, when given), else None."""
    names = list(names)
    wanted = set(names if among is None else among)
    seen: set = set()
    for name in names:
        if name in seen and name in wanted:
            return name
        seen.add(name)
    return None


def check_header(where: str, header: Iterable[Any], among: Iterable[Any] | None = None) -> None:
    """Refuse a header that names a column twice (only the columns in `among`, when given: those a reader reads);
    `where` is the file and line as the caller's other messages give them."""
    if (twice := repeated(header, among)) is not None:
        raise DataError(f"{where}: column {short(twice, 60)} is named twice in the header; {UNIQUE_COLUMNS}")


class RepeatedKey(ValueError):
    """An object of the text gives `key` twice; `line` and `column` (1-based) are where that object starts."""

    def __init__(self, key: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"the key {short(key, 60)} is given twice in one object; {UNIQUE_KEYS}")
        self.key, self.line, self.column = key, line, column


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise RepeatedKey(repeated(key for key, _ in pairs))
    return found


# Built once: `json.loads(text, object_pairs_hook=...)` builds a decoder per call, which doubled the time of a JSON
# Lines file of short rows; this one costs a few percent over json's own on flat rows (~20% on nested objects).
_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


def loads(text: str) -> Any:
    """`json.loads(text)`, but an object that gives a key twice raises RepeatedKey (a ValueError, not a
    JSONDecodeError) where json would keep the key's last value."""
    try:
        return _DECODER.decode(text)
    except RepeatedKey as e:
        raise _located(text, e.key) from None


def _located(text: str, key: str) -> RepeatedKey:
    """The error with the line and column of the first object that repeats a key, found by reading the text again
    with json's Python scanner, which knows where each object starts (slow, so only once a key was found twice)."""
    starts: list[int] = []

    def parse_object(s_and_end, *args):
        try:
            return json.decoder.JSONObject(s_and_end, *args)
        except RepeatedKey:
            if not starts:  # the innermost object raises first
                starts.append(s_and_end[1] - 1)
            raise

    decoder = json.JSONDecoder(object_pairs_hook=_unique)
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    with contextlib.suppress(RepeatedKey):
        decoder.decode(text)
    at = starts[0] if starts else 0
    return RepeatedKey(key, text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1)
