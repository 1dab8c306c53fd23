"""Packed data's meta.json read through data/migrate_packed.py: an index of format 1 (`format: 1`, written before the
largest token id and the tokenizer's and shards' digests were recorded) reads as the checks of its time read it and
keeps its identity, a newer or unknown format is refused in one line, the current one round-trips."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from encoderlab.core.errors import DataError, EncoderlabError
from encoderlab.data import migrate_packed, packing


@pytest.fixture
def packed(tmp_path, packed_dir):
    out = tmp_path / "packed"
    shutil.copytree(packed_dir, out)
    return out


def as_format_1(meta: dict) -> dict:
    """The index as encoderlab wrote it before these fields existed."""
    old = {k: v for k, v in meta.items() if k not in ("format_version", "tokenizer_files", "max_token_id")}
    old["splits"] = {name: {**split, "shards": [{k: v for k, v in shard.items() if k != "sha256"}
                                                for shard in split["shards"]]}
                     for name, split in meta["splits"].items()}
    return {"format": 1, **old}


def test_a_current_index_round_trips(packed):
    written = json.loads((packed / packing.META).read_text())
    assert written["format_version"] == migrate_packed.FORMAT and "format" not in written
    assert packing.read_meta(packed) == written


def test_an_index_of_format_1_reads_as_its_checks_read_it_and_keeps_its_identity(packed):
    old = as_format_1(packing.read_meta(packed))
    (packed / packing.META).write_text(json.dumps(old))
    meta = packing.read_meta(packed)
    assert meta["format_version"] == migrate_packed.FORMAT and meta["tokenizer_files"] is None
    assert meta["max_token_id"] == old["tokenizer"]["vocab_size"] - 1 == packing.max_token_id(meta)
    identity = {k: old[k] for k in ("seq_len", "dtype", "tokenizer", "splits")}  # what it was fingerprinted by
    assert packing.fingerprint(meta) == hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    packing.check_shards(packed, meta, hashes=True, fix="x")  # sizes, and the tokenizer by loading it
    shard = packed / f"{old['splits']['train']['shards'][0]['name']}.tokens.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(DataError, match=r"tokens.bin has \d+ bytes, meta.json expects"):
        packing.check_shards(packed, meta, hashes=True, fix="x")


@pytest.mark.parametrize(("written", "says"), [
    ({"format_version": 3}, r"meta.json has format_version 3, newer than 2, the newest this encoderlab reads"),
    ({"format": 7}, r"meta.json says format 7, which no encoderlab wrote: prepare the data again"),
    ({}, r"meta.json says no format \(neither format_version nor format\)"),
])
def test_an_index_of_an_unknown_format_is_refused_naming_it(packed, written, says):
    meta = {k: v for k, v in json.loads((packed / packing.META).read_text()).items() if k != "format_version"}
    (packed / packing.META).write_text(json.dumps({**meta, **written}))
    with pytest.raises(EncoderlabError, match=rf"^{packed / packing.META} {says.split('meta.json ', 1)[1]}"):
        packing.read_meta(packed)
