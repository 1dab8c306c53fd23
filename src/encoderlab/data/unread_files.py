"""Files in a source folder or glob that hold data encoderlab cannot read, as opposed to files beside the corpus.

A README or a licence is skipped without a word; skipping `part-3.jsonl.zst` the same way would silently leave part
of the corpus out, so such a file is refused instead, naming it and the way out.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# What a name ends with, below the compression: a text or table format, so the file is corpus.
_DATA_FORMATS = (".txt", ".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv")


def unread_data(paths: Iterable[Path], read: tuple[str, ...]) -> str | None:
    """Why one of `paths` (files left out because their suffix is not in `read`) must not be skipped, or None."""
    for path in paths:
        name = path.name.lower()
        stem, dot, compression = name.rpartition(".")
        if dot and stem.endswith(_DATA_FORMATS):
            formats = ", ".join(s for s in read if s.endswith(".gz"))
            return (f"{path}: compressed as .{compression}, which encoderlab does not read (it reads {formats}); "
                    "decompress it, or recompress it with gzip, so that it is not left out of the corpus")
    return None
