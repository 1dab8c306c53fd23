"""Packed data's index (`meta.json`) of any format, in the current one: what `data/packing.py` reads it through.

Packed data had a version before the other artifacts: `format: 1`. So its `format_version` starts at 2, and a
version number never means two things for it. Format 2 holds every field `packing.finish` writes: the largest token
id (`max_token_id`), the size and SHA-256 of each tokenizer file (`tokenizer_files`) and of each shard file (a
shard's `sha256`). Format 1 was written before some of these existed; what it lacks reads as:
- `max_token_id`: the tokenizer's last id (the largest any token of the data can have);
- `tokenizer_files`: None, not recorded: the tokenizer is checked by loading it and comparing its vocabulary and
  special ids with the index's, and the data's identity (`packing.fingerprint`) is what it was;
- a shard's `sha256`: stays absent, and the shard is checked by its size only. The shards are part of the data's
  identity as they were written (`packing.fingerprint` hashes them), so they are left exactly as they were.
An index without any version is refused: no encoderlab wrote one.
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.core import formats
from encoderlab.core.errors import DataError

FORMAT = 2
LEGACY_FIELD = "format"  # format 1's version field


def upgrade(meta: dict, where: Path) -> dict:
    """The index read from `where` in the current format. KeyError, TypeError or ValueError when it lacks what
    every format has (the caller names it as not an index); DataError for a version this code does not read."""
    if formats.FIELD not in meta and LEGACY_FIELD in meta:
        if meta[LEGACY_FIELD] != 1:
            raise DataError(f"{where} says format {meta[LEGACY_FIELD]!r}, which no encoderlab wrote: prepare the "
                            "data again")
        meta = {**{k: v for k, v in meta.items() if k != LEGACY_FIELD}, formats.FIELD: 1}
    return formats.upgrade(meta, where, [_unversioned(where), _from_format_1])


def _unversioned(where: Path):
    def refuse(meta: dict) -> dict:
        raise DataError(f"{where} says no format (neither format_version nor format): not an index encoderlab "
                        "wrote; prepare the data again")
    return refuse


def _from_format_1(meta: dict) -> dict:
    return {"max_token_id": meta["tokenizer"]["vocab_size"] - 1, "tokenizer_files": None, **meta}
