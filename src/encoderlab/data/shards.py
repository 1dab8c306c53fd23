"""Sharded preparation: `data prepare SOURCE --shard I/N` tokenises a deterministic 1/N of a source into parts;
`data prepare SOURCE --join N` packs the parts into one dataset, byte-identical for any N and to the one-process
`data prepare` with the same tokenizer.

The source is cut into units that do not depend on N: its files when it has several, else blocks of
PART_DOCUMENTS documents. Shard I of N tokenises the units u with u % N == I, one part each (`parts/part-UUUUUU.*`):
the documents' `<bos> ids <eos>` one after the other, and a TSV of (id, source, tokens). A part is complete when
its manifest (sizes, SHA-256, counts) exists; it is written after the part's files are renamed into place, so a
killed shard resumes at its first unit without a valid manifest, and half-written temporary files are removed.
Parts hold no split or window: the join chooses seq_len, val_fraction and the token budget. It only reads (no
tokenising): the parts in unit order through the same Packer as the one-process path, each part's bytes hashed as
they are read and compared with its manifest, so joining 100B tokens is bound by the disk.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import shlex
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from encoderlab.core.errors import DataError
from encoderlab.core.io import atomic_dir, sha256_of, write_json
from encoderlab.data import packing, sources
from encoderlab.data.documents import Document
from encoderlab.data.tokenizer import TextTokenizer, load_tokenizer

PART_DOCUMENTS = 65_536  # a unit of a one-file source; fixed, so units (and parts) are the same for any N
PARTS_FORMAT = 1
_FILES = {"tokens": "tokens.bin", "documents": "documents.tsv"}


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N) with 0 <= I < N, refused in one line otherwise."""
    i, _, n = text.partition("/")
    if not (i.isdigit() and n.isdigit()) or not 0 <= int(i) < int(n):
        raise DataError(f"--shard {text!r} must be I/N with 0 <= I < N (shard I of N, counted from 0), e.g. 0/4")
    return int(i), int(n)


def parse_tokens(text: str) -> int:
    """'100B', '5M', '64K' or a plain number of tokens (K, M, B: thousands, millions, billions)."""
    scale = {"K": 10**3, "M": 10**6, "B": 10**9}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        value = -1.0
    if value <= 0 or value != int(value):
        raise DataError(f"--max-tokens {text!r} is not a positive whole number of tokens (e.g. 100B, 5M, 64K, 4096)")
    return int(value)


def _part(folder: Path, unit: int, kind: str) -> Path:
    return folder / f"part-{unit:06d}.{_FILES.get(kind, kind)}"


def _shard_file(folder: Path, i: int, n: int) -> Path:
    return folder / f"shard-{i}-of-{n}.json"


def inputs_key(source: str, tok: TextTokenizer, text_options: dict) -> str:
    """What a part's content depends on: the source, how its text is read, the tokenizer's content."""
    parts = [source, json.dumps(text_options, sort_keys=True), tok.tokenizer.to_str(),
             json.dumps(tok.info(), sort_keys=True), str(PART_DOCUMENTS), str(PARTS_FORMAT)]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _units(source: str, text_options: dict, hub: dict) -> Iterator[Callable[[], Iterator[Document]]]:
    """Every unit of the source in order, as a function that reads it: files are opened only when asked for;
    the blocks of a single stream are read by every shard (a source in one file is a small one)."""
    by_file = sources.documents_by_file(source, **text_options)
    if by_file is not None:
        yield from by_file
        return
    docs = sources.iter_documents(source, **text_options, **hub)
    while block := list(itertools.islice(docs, PART_DOCUMENTS)):
        yield lambda block=block: iter(block)


def prepare_shard(source: str, out: Path, opts, log: Callable[[str], None]) -> dict:
    """Tokenise the units of shard I/N that have no complete part yet; record the shard as complete."""
    i, n = opts.shard  # opts: prepare.PrepareOptions (not imported: prepare imports this module)
    tok = load_tokenizer(opts.tokenizer)
    text_options, hub = opts.text_options(), {"hf_config": opts.hf_config, "hf_split": opts.hf_split}
    key = inputs_key(source, tok, text_options)
    folder = out / "parts"
    folder.mkdir(parents=True, exist_ok=True)
    dtype = packing.token_dtype(tok.vocab_size)
    files = sources.file_states(source)
    done = skipped = units = 0
    for unit, read in enumerate(_units(source, text_options, hub)):
        units += 1
        if unit % n != i:
            continue
        if not opts.force and _part_complete(folder, unit, key, _read_from(files, unit)):
            skipped += 1
            continue
        manifest = _write_part(folder, unit, read(), tok, dtype, key, _read_from(files, unit))
        done += 1
        log(f"shard {i}/{n}: part {unit} ({manifest['documents']:,} documents, {manifest['tokens']:,} tokens)")
    write_json(_shard_file(folder, i, n), {"shard": i, "of": n, "inputs": key, "units": units,
                                            "parts": list(range(i, units, n))})
    return {"source": source, "root": str(out), "shard": f"{i}/{n}", "units": units,
            "parts_written": done, "parts_skipped": skipped, "parts": str(folder)}


def _read_from(files: list[dict] | None, unit: int) -> list[dict]:
    """The source files a unit is read from, as `sources.file_states` gives them: a unit is a file of a source with
    several, a block of the one file otherwise; none for a hub dataset."""
    if files is None:
        return []
    if len(files) == 1:
        return files
    return [files[unit] if unit < len(files) else {"file": f"file {unit} of the source (gone since)"}]


def _stale_source(manifest: dict, read_from: list[dict]) -> bool:
    """Whether the files a part was tokenised from have changed since (size or modification time). Parts written
    before these were recorded have no record, and are taken as they are."""
    return "source_files" in manifest and manifest["source_files"] != read_from


def _part_complete(folder: Path, unit: int, key: str, read_from: list[dict]) -> bool:
    """A part with a readable manifest of the same inputs whose files have the recorded sizes and SHA-256, read from
    source files that have not changed since."""
    try:
        manifest = json.loads(_part(folder, unit, "json").read_text())
        return manifest["inputs"] == key and not _stale_source(manifest, read_from) and all(
            (path := _part(folder, unit, kind)).stat().st_size == rec["bytes"] and sha256_of(path) == rec["sha256"]
            for kind, rec in manifest["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _write_part(folder: Path, unit: int, docs: Iterator[Document], tok: TextTokenizer, dtype: np.dtype,
                key: str, read_from: list[dict]) -> dict:
    """Stream the unit's tokens and rows to temporary files (hashed as written), rename them, then the manifest."""
    for stale in folder.glob(f".part-{unit:06d}.*"):  # left by a killed run
        stale.unlink()
    tmp = {kind: folder / f".{_part(folder, unit, kind).name}.tmp-{os.getpid()}" for kind in _FILES}
    hashes = {kind: hashlib.sha256() for kind in _FILES}
    counts: Counter[str] = Counter()
    stats = {"documents": 0, "tokens": 0, "words": 0, "characters": 0}
    try:
        with open(tmp["tokens"], "wb") as ft, open(tmp["documents"], "wb") as fd:
            for chunk in packing.chunks(docs, 2048):
                tokens, lengths = packing.with_specials(tok.encode_batch([d.text for d in chunk]), tok.bos_id,
                                                        tok.eos_id, dtype)
                rows = "".join(f"{d.id}\t{d.source}\t{k}\n" for d, k in zip(chunk, lengths.tolist())).encode()
                for kind, data, f in (("tokens", tokens.data, ft), ("documents", rows, fd)):
                    f.write(data)
                    hashes[kind].update(data)
                counts.update(d.source for d in chunk)
                stats["documents"] += len(chunk)
                stats["tokens"] += len(tokens)
                stats["words"] += sum(len(d.text.split()) for d in chunk)
                stats["characters"] += sum(len(d.text) for d in chunk)
    except BaseException:  # a failure or Ctrl-C: the half-written part goes (only a kill leaves it to the next run)
        for path in tmp.values():
            path.unlink(missing_ok=True)
        raise
    files = {}
    for kind, path in tmp.items():
        files[kind] = {"bytes": path.stat().st_size, "sha256": hashes[kind].hexdigest()}
        os.replace(path, _part(folder, unit, kind))
    manifest = {"format": PARTS_FORMAT, "unit": unit, "inputs": key, "dtype": dtype.name, **stats,
                "documents_by_source": dict(sorted(counts.items())), "files": files, "source_files": read_from}
    write_json(_part(folder, unit, "json"), manifest)
    return manifest


def join(source: str, out: Path, opts, log: Callable[[str], None]) -> tuple[dict, dict]:
    """Pack the parts of shards 0..N-1 (N = opts.join) into `out/packed` after checking that every one is there,
    complete and of these inputs. Returns (corpus counts, meta); an up-to-date packed folder is kept."""
    n, tok = opts.join, load_tokenizer(opts.tokenizer)
    key = inputs_key(source, tok, opts.text_options())
    folder = out / "parts"
    command = shlex.join(["encoderlab", "data", "prepare", source, "--out", str(out), "--tokenizer",
                          str(opts.tokenizer), *opts.flags("text_column", "txt_unit", "on_invalid_utf8", "hf_config",
                                                           "hf_split")])
    source_files = _source_files(source)
    manifests = _check_parts(folder, key, n, command, source_files)
    if source_files is None and any(m.get("source_files") for m in manifests):
        log(f"{source} is not there (moved or deleted since it was tokenised): the parts are taken as they were "
            "tokenised, unchecked for changes to it")
    corpus = {"source": source, "parts": len(manifests),
              **{k: sum(m[k] for m in manifests) for k in ("documents", "words", "characters")},
              "documents_by_source": dict(sorted(sum((Counter(m["documents_by_source"]) for m in manifests),
                                                     Counter()).items()))}
    fingerprint = hashlib.sha1(json.dumps([key, opts.seq_len, opts.val_fraction, opts.max_tokens,
                                           [m["files"] for m in manifests]]).encode()).hexdigest()
    try:
        meta = packing.read_meta(out / "packed")
    except DataError:  # none yet, or unreadable: packed again
        meta = {}
    if meta.get("inputs") == fingerprint and not opts.force:  # damaged shards are refused, as by `data prepare`
        packing.check_shards(out / "packed", meta, hashes=True, fix="join again with --force")
        log(f"packed shards up to date in {out / 'packed'}")
        return corpus, meta
    log(f"joining {len(manifests)} parts ({corpus['documents']:,} documents) into windows of {opts.seq_len}")
    dtype = packing.token_dtype(tok.vocab_size)
    with atomic_dir(out / "packed") as tmp:
        packer = packing.Packer(tmp, opts.seq_len, dtype, opts.val_fraction, 2**26, opts.max_tokens, tok.unk_id,
                                (tok.bos_id, tok.eos_id))
        for unit, manifest in enumerate(manifests):
            shard_command = f"{command} --shard {unit % n}/{n}"
            for tokens, lengths, rows in _read_part(folder, unit, manifest, dtype, shard_command):
                packer.add(tokens, lengths, rows)
                if packer.full:
                    break
            if packer.full:
                break
        meta = packing.finish(tmp, packer, tok, opts.seq_len, opts.val_fraction, opts.max_tokens)
        meta["inputs"] = fingerprint
        write_json(tmp / packing.META, meta)
    if note := packing.no_validation_note(meta):
        log(note)
    return corpus, meta


def _source_files(source: str) -> list[dict] | None:
    """The source's files as `sources.file_states` gives them; None for a hub id, or for a local source that is no
    longer there: the parts hold its text, so the join needs it only to see whether it changed, which it cannot."""
    try:
        return sources.file_states(source)
    except (DataError, OSError):  # no such file or folder, a glob matching nothing, a file gone while read
        return None


def _check_parts(folder: Path, key: str, n: int, command: str, source_files: list[dict] | None) -> list[dict]:
    """Every shard's record and every part's manifest and file sizes, before anything is written. A part is checked
    against its source's files when they are there (`source_files` not None)."""
    units = None
    for i in range(n):
        again = f"run `{command} --shard {i}/{n}`"
        try:
            record = json.loads(_shard_file(folder, i, n).read_text())
        except (OSError, ValueError):
            raise DataError(f"shard {i}/{n} is not complete ({_shard_file(folder, i, n)} is missing or "
                            f"unreadable): {again}") from None
        if record.get("inputs") != key:
            raise DataError(f"shard {i}/{n} was prepared from other inputs (source, text options or tokenizer): "
                            "give the join the --text-column, --txt-unit and --on-invalid-utf8 its shards were "
                            f"given, or {again}")
        if units is not None and record["units"] != units:
            raise DataError(f"shard {i}/{n} counted {record['units']} units of the source, shard 0/{n} {units}: "
                            f"the source changed between them; {again} and the others")
        units = record["units"]
    manifests = []
    for unit in range(units or 0):
        again = f"run `{command} --shard {unit % n}/{n}` again (it redoes that part)"
        try:
            manifest = json.loads(_part(folder, unit, "json").read_text())
            files = manifest["files"]
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(f"part {unit} of shard {unit % n}/{n} has no readable manifest "
                            f"({_part(folder, unit, 'json')}): {again}") from None
        if manifest.get("inputs") != key:
            raise DataError(f"part {unit} of shard {unit % n}/{n} was tokenised from other inputs: {again}")
        if source_files is not None and _stale_source(manifest, read_from := _read_from(source_files, unit)):
            changed = ", ".join(f["file"] for f in read_from if f not in manifest["source_files"]) or "its source"
            raise DataError(f"part {unit} of shard {unit % n}/{n}: {changed} changed since the part was tokenised "
                            f"(size or modification time): {again}")
        for kind, rec in files.items():
            path = _part(folder, unit, kind)
            found = path.stat().st_size if path.is_file() else None
            if found != rec["bytes"]:
                raise DataError(f"part {unit} of shard {unit % n}/{n}: {path} has {found} bytes, its manifest "
                                f"says {rec['bytes']}: {again}")
        manifests.append(manifest)
    return manifests


def _read_part(folder: Path, unit: int, manifest: dict, dtype: np.dtype, shard_command: str,
               hint: int = 1 << 20) -> Iterator[tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]]:
    """A part's documents in batches of about `hint` bytes of rows, hashed as read: a part whose bytes differ from
    its manifest is refused naming it once read (its size was checked before the join began)."""
    hashes = {kind: hashlib.sha256() for kind in _FILES}
    with open(_part(folder, unit, "tokens"), "rb") as ft, open(_part(folder, unit, "documents"), "rb") as fd:
        while lines := fd.readlines(hint):
            hashes["documents"].update(b"".join(lines))
            fields = [line.decode("utf-8").rstrip("\n").split("\t") for line in lines]
            lengths = np.array([int(f[2]) for f in fields], dtype=np.int64)
            raw = ft.read(int(lengths.sum()) * dtype.itemsize)
            hashes["tokens"].update(raw)
            yield np.frombuffer(raw, dtype=dtype), lengths, [(f[0], f[1]) for f in fields]
        hashes["tokens"].update(ft.read())
    for kind, h in hashes.items():
        if h.hexdigest() != manifest["files"][kind]["sha256"]:
            raise DataError(f"part {unit}: {_part(folder, unit, kind)} does not match the SHA-256 in its manifest "
                            f"(damaged after it was written): run `{shard_command}` again (it redoes that part)")
