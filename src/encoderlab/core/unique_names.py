"""Names a file must give once: a table's columns.

Readers keep one of two same-named columns without a word: `csv.DictReader` the last, `header.index` and pyarrow
the first. Which text a corpus holds or which label a task trains on would then depend on a writer's bug, so every
reader of user data refuses a column named twice, through the check here, in one wording.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from encoderlab.core.errors import DataError

UNIQUE_COLUMNS = "column names must be unique: rename one"


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
        raise DataError(f"{where}: column {twice!r} is named twice in the header; {UNIQUE_COLUMNS}")

