"""Files in a source folder or glob that hold data encoderlab cannot read, as opposed to files beside the corpus.

A README or a licence is skipped without a word; skipping `part-3.jsonl.zst` the same way would silently leave part
of the corpus out, so such a file is refused instead, naming it and the way out.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

def unread_data(paths: Iterable[Path], read: tuple[str, ...]) -> str | None:
    """Why one of `paths` (files left out because their suffix is not in `read`) must not be skipped, or None: a
    name that ends, below a compression not read, in a format that is (so the file is corpus)."""
    formats = tuple(s for s in read if not s.endswith(".gz"))
    for path in paths:
        name = path.name.lower()
        stem, dot, compression = name.rpartition(".")
        if dot and stem.endswith(formats):
            gzipped = ", ".join(s for s in read if s.endswith(".gz"))
            return (f"{path}: compressed as .{compression}, which encoderlab does not read (it reads {gzipped}); "
                    "decompress it, or recompress it with gzip, so that it is not left out of the corpus")
    return None
