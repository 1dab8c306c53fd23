"""Versioned formats: every stored artifact (a checkpoint's state.json, a fine-tuning record, the protocol a record
holds and its key, a study's plan.json, packed data's meta.json) says its `format_version`, and is read through its
own migration module, which takes any earlier version (no field: version 0, what was written before formats had
versions) to the current one, step by step. The code that uses an artifact reads only the current format.

A version newer than this encoderlab knows is refused in one line naming the file, its version and the newest known:
an older encoderlab must not guess at what a newer one wrote.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from encoderlab.core.errors import EncoderlabError

FIELD = "format_version"
Step = Callable[[dict], dict]  # version N's dict -> version N + 1's


def version_of(data: dict, where: str | Path, newest: int) -> int:
    """The format version `data` (read from `where`) says: 0 when it says none; refused when it is not a version
    or is newer than `newest`."""
    found = data.get(FIELD, 0)
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise EncoderlabError(f"{where}: {FIELD} {found!r} is not a format version (a whole number from 0 to "
                              f"{newest})")
    if found > newest:
        raise EncoderlabError(f"{where} has {FIELD} {found}, newer than {newest}, the newest this encoderlab reads: "
                              "it was written by a newer encoderlab; upgrade encoderlab to read it")
    return found


def upgrade(data: dict, where: str | Path, steps: Sequence[Step]) -> dict:
    """`data` in the current format, `len(steps)`: `steps[n]` takes version n to n + 1. A copy; `data` is left as
    it was read."""
    out = dict(data)
    for step in steps[version_of(data, where, len(steps)):]:
        out = step(out)
    out[FIELD] = len(steps)
    return out
