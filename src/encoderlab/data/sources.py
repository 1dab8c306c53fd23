"""Text sources: local txt/jsonl/parquet/csv files, folders and globs, or a Hugging Face datasets hub id.

Everything streams, so a corpus larger than memory can be prepared. Files are read as bytes and decoded one
line (or value) at a time, so invalid UTF-8 can be reported with its file and line and handled as the user
chooses.
Document ids are `relative_path:index`, stable across runs, so a prepared corpus can be audited.
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import itertools
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from glob import glob
from pathlib import Path
from typing import Any, Literal, get_args

from encoderlab.core.errors import DataError, given_as, option_name
from encoderlab.core.io import lone_surrogate
from encoderlab.core import unique_names
from encoderlab.data.columnar import arrow_rows, parquet_rows, saved_dataset_metadata
from encoderlab.data.documents import Document
from encoderlab.data.hub_access import _hub_unreachable, is_network_error, offline_variable, probe_hub
from encoderlab.data.unread_files import unread_data

TxtUnit = Literal["file", "paragraph", "line"]
OnInvalidUtf8 = Literal["error", "replace", "skip"]

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".txt", ".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv",
    ".txt.gz", ".jsonl.gz", ".json.gz", ".csv.gz", ".tsv.gz",
)  # fmt: skip
_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv",
            ".tsv": "tsv"}
COLUMNAR = {"parquet": parquet_rows, "arrow": arrow_rows}
# "owner/name" or "name"; a second "/" or a data-file suffix means the user meant a path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_FILE_LIKE = re.compile(r"\.(txt|jsonl|json|parquet|csv|tsv|gz|bz2|xz|zst|zip|tar|arrow|md)$", re.IGNORECASE)
_GLOB_CHARS = re.compile(r"[*?[]")
# A JSON Lines record's own fields that encoderlab's corpus also names: kept as the user wrote them
# (data/prepare.py writes encoderlab's own under encoderlab_id and encoderlab_source beside them).
OWN_FIELDS = ("id", "source")
Decoder = Callable[[bytes, str], "str | None"]  # (raw bytes, "line 3") -> text, or None to drop the document


@dataclass(frozen=True)
class _LocalFile:
    path: Path
    name: str  # relative posix path: the prefix of every document id from this file
    suffix: str  # one of SUPPORTED_SUFFIXES


def iter_documents(
    spec: str,
    *,
    text_column: str = "text",
    txt_unit: TxtUnit = "paragraph",
    on_invalid_utf8: OnInvalidUtf8 = "error",
    hf_config: str | None = None,
    hf_split: str = "train",
    max_documents: int | None = None,
) -> Iterator[Document]:
    """Stream the non-empty, whitespace-stripped documents of a local path, glob or Hugging Face hub id.

    The spec is resolved (and a hub dataset opened) at call time, so a missing path or an unreachable hub
    fails here rather than at the first `next()`; the files themselves are read lazily.
    """
    _check_choice("txt_unit", txt_unit, get_args(TxtUnit))
    _check_choice("on_invalid_utf8", on_invalid_utf8, get_args(OnInvalidUtf8))
    if max_documents is not None and max_documents < 0:
        raise DataError(f"max_documents must be >= 0 or None (no limit), got {max_documents}")
    files = _resolve(spec)
    if files is None:
        docs = _iter_hub(spec, _open_hub(spec, hf_config, hf_split, text_column), text_column)
    else:
        docs = _iter_local(files, text_column, txt_unit, on_invalid_utf8)
    return _limit(docs, max_documents)


def documents_by_file(spec: str, *, text_column: str = "text", txt_unit: TxtUnit = "paragraph",
                      on_invalid_utf8: OnInvalidUtf8 = "error") -> list[Callable[[], Iterator[Document]]] | None:
    """One stream per file of a local spec with several files, in the order `iter_documents` reads them (same ids);
    None for one file or a hub id. Lets a worker read only its own files."""
    _check_choice("txt_unit", txt_unit, get_args(TxtUnit))
    _check_choice("on_invalid_utf8", on_invalid_utf8, get_args(OnInvalidUtf8))
    files = _resolve(spec)
    if files is None or len(files) < 2:
        return None
    return [lambda f=f: _iter_local([f], text_column, txt_unit, on_invalid_utf8) for f in files]


def file_states(spec: str) -> list[dict] | None:
    """Each file of a local spec as {file, bytes, mtime_ns}, in reading order: what a sharded part records of the
    files it read, so that an edited source is seen; None for a hub id."""
    files = _resolve(spec)
    if files is None:
        return None
    return [{"file": f.name, "bytes": (st := f.path.stat()).st_size, "mtime_ns": st.st_mtime_ns} for f in files]


def describe_spec(spec: str) -> str:
    """One line for summaries, e.g. "3 local files (.jsonl)"; raises DataError as `iter_documents` would."""
    files = _resolve(spec)
    if files is None:
        return f"Hugging Face dataset {spec}"
    suffixes = ", ".join(sorted({f.suffix for f in files}))
    return f"{len(files)} local file{'s' if len(files) != 1 else ''} ({suffixes})"


def _limit(docs: Iterator[Document], n: int | None) -> Iterator[Document]:
    # closing() releases the open file as soon as the caller stops early, not whenever GC runs.
    with contextlib.closing(docs):  # type: ignore[type-var]
        yield from itertools.islice(docs, n)


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DataError(f"{name}={value!r} is not allowed; choose one of {', '.join(allowed)}")


def _supported_suffix(path: Path) -> str | None:
    name = path.name.lower()
    return max((s for s in SUPPORTED_SUFFIXES if name.endswith(s)), key=len, default=None)


def _resolve(spec: str) -> list[_LocalFile] | None:
    """The files a spec names, sorted by relative path; None when the spec is a hub id."""
    path = Path(spec).expanduser()
    if path.is_file():
        if (suffix := _supported_suffix(path)) is None:
            raise DataError(f"{path}: unsupported file type; supported: {', '.join(SUPPORTED_SUFFIXES)}")
        return [_LocalFile(path, path.name, suffix)]
    if path.is_dir():
        return _files_below(path, _walk(path), f"folder {path}")
    if _GLOB_CHARS.search(spec):
        # Ids are relative to the pattern's part before the first wildcard, so "a/*/x.jsonl" stays unique.
        root = Path(*itertools.takewhile(lambda part: not _GLOB_CHARS.search(part), path.parts))
        matches = [Path(m) for m in glob(str(path), recursive=True)]
        if not matches:
            raise DataError(f"{given_as(spec)}no such file or directory: {spec} (the pattern matched nothing)")
        found = itertools.chain.from_iterable(_walk(m) if m.is_dir() else [m] for m in matches)
        return _files_below(root, found, f"pattern {spec}")
    if _HUB_ID.fullmatch(spec) and not _FILE_LIKE.search(spec):
        return None
    raise DataError(f"{given_as(spec)}no such file or directory: {spec}")


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # .git, .cache and the like are never corpus
        yield from (Path(folder, n) for n in names if not n.startswith("."))


def _files_below(root: Path, paths: Iterable[Path], where: str) -> list[_LocalFile]:
    files: dict[str, _LocalFile] = {}
    ignored: list[Path] = []
    paths = list(paths)
    metadata = saved_dataset_metadata(paths)  # a `datasets` folder's own JSON files beside its Arrow rows
    for p in paths:
        if p in metadata:
            continue
        if (suffix := _supported_suffix(p)) is None:
            ignored.append(p)
        else:
            name = p.relative_to(root).as_posix() if p.is_relative_to(root) else p.as_posix()
            files[name] = _LocalFile(p, name, suffix)
    if problem := unread_data(ignored, SUPPORTED_SUFFIXES):
        raise DataError(problem)
    if not files:
        example = f"; ignored {len(ignored)} other files such as {ignored[0].name}" if ignored else ""
        raise DataError(
            f"{where} has no supported files (looked for {', '.join(SUPPORTED_SUFFIXES)}{example}); "
            "point PATH at a file or folder holding such files"
        )
    return [files[n] for n in sorted(files, key=lambda n: n.split("/"))]


def _iter_local(
    files: list[_LocalFile], column: str, unit: TxtUnit, on_bad: OnInvalidUtf8
) -> Iterator[Document]:
    for f in files:
        source = f"local:{f.name}"
        for index, text, own in _records(f, column, unit, _decoder(f.path, on_bad)):
            if text := text.strip():
                yield Document(id=f"{f.name}:{index}", source=source, text=text, own=own)


def _records(f: _LocalFile, column: str, unit: TxtUnit, dec: Decoder) -> Iterator[tuple[int, str, tuple]]:
    """(index, text, the record's own `id` and `source` fields: JSON Lines only)."""
    fmt = _FORMATS[f.suffix.removesuffix(".gz")]
    if fmt in COLUMNAR:
        yield from _plain(_read_columnar(f.path, column, dec, COLUMNAR[fmt]))
        return
    try:
        with gzip.open(f.path, "rb") if f.suffix.endswith(".gz") else open(f.path, "rb") as fh:
            lines = _numbered_lines(fh)
            if fmt == "txt":
                yield from _plain(_read_txt(lines, unit, dec))
            elif fmt == "jsonl":
                yield from _read_jsonl(f.path, lines, column, dec)
            else:
                yield from _plain(_read_csv(f.path, lines, column, "\t" if fmt == "tsv" else ",", dec))
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DataError(f"{f.path}: damaged or not gzip ({e}); re-download or decompress it") from e
    except OSError as e:
        raise DataError(f"{f.path}: cannot read ({e}); check that it exists and is readable") from e


def _plain(records: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str, tuple]]:
    return ((index, text, ()) for index, text in records)


def _decoder(path: Path, mode: OnInvalidUtf8) -> Decoder:
    def decode(raw: bytes, where: str) -> str | None:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if mode == "error":
                raise DataError(
                    f"{path}: {where}: invalid UTF-8 at byte {e.start} ({e.reason}); fix the file, or pass "
                    "--on-invalid-utf8 replace (bad bytes become U+FFFD) or skip (drop such documents)"
                ) from None
            return raw.decode("utf-8", "replace") if mode == "replace" else None

    return decode


def _numbered_lines(fh: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for n, raw in enumerate(fh, start=1):
        if n == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a BOM would end up in the first text or the csv header
        yield n, raw.rstrip(b"\r\n")


def _read_txt(lines: Iterable[tuple[int, bytes]], unit: TxtUnit, dec: Decoder) -> Iterator[tuple[int, str]]:
    if unit == "line":  # index = line number, so an id points straight at its line
        for n, raw in lines:
            if (text := dec(raw, f"line {n}")) is not None:
                yield n, text
        return
    # Paragraphs are counted whether dropped or not, so ids do not shift when --on-invalid-utf8 changes.
    index, buf, bad = 0, [], False
    for n, raw in lines:
        text = dec(raw, f"line {n}")
        if text is None:
            bad = True
        elif unit == "paragraph" and not text.strip():
            if buf or bad:
                if not bad:
                    yield index, "\n".join(buf)
                index, buf, bad = index + 1, [], False
        else:
            buf.append(text)
    if buf and not bad:
        yield index, "\n".join(buf)


def _read_jsonl(
    path: Path, lines: Iterable[tuple[int, bytes]], column: str, dec: Decoder
) -> Iterator[tuple[int, str, tuple]]:
    for n, raw in lines:  # index = line number, as in the error messages
        line = dec(raw, f"line {n}")
        if line is None or not line.strip():
            continue
        try:
            record = unique_names.loads(line)
        except unique_names.RepeatedKey as e:
            raise DataError(f"{path}: line {n}: {e}") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {n}: not valid JSON ({e.msg}, column {e.colno}); .jsonl and .json files "
                            "are read as JSON Lines: one complete JSON object per line") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {n}: expected a JSON object, got a {type(record).__name__}")
        if problem := lone_surrogate(line, record):
            raise DataError(f"{path}: line {n}: {problem}")
        if column not in record:
            raise _no_column(f"{path}: line {n}: the record", column, record)
        own = tuple((key, record[key]) for key in OWN_FIELDS if key in record and key != column)
        yield n, _as_text(record[column], f"{path}: line {n}", column), own


def _no_column(where: str, column: str, available: Iterable[str]) -> DataError:
    names = ", ".join(itertools.islice(available, 30)) or "none"
    return DataError(f"{where} has no column {column!r} (it has: {names}); pass {option_name('text-column')} with one")


def _as_text(value: Any, where: str, column: str) -> str:
    # null means "no text here", like an empty string; any other non-string means the wrong column was chosen.
    if value is None or isinstance(value, str):
        return value or ""
    raise DataError(
        f"{where}: column {column!r} holds a {type(value).__name__}, not a string; "
        f"pass {option_name('text-column')} naming a text column"
    )


def _read_csv(
    path: Path, lines: Iterable[tuple[int, bytes]], column: str, delimiter: str, dec: Decoder
) -> Iterator[tuple[int, str]]:
    bad = False  # set while the reader pulls the lines of one row: a quoted field may span several lines

    def text_lines() -> Iterator[str]:
        nonlocal bad
        for n, raw in lines:
            if (text := dec(raw, f"line {n}")) is None:
                bad, text = True, raw.decode("utf-8", "replace")
            yield text + "\n"

    def next_row() -> list[str] | None:
        try:
            return next(reader)
        except StopIteration:
            return None
        except csv.Error as e:
            raise DataError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None

    # The default 128 KiB per field is less than many real documents; 2**31-1 still fits a C long on Windows.
    csv.field_size_limit(2**31 - 1)
    reader = csv.reader(text_lines(), delimiter=delimiter)
    if (header := next_row()) is None:
        raise DataError(f"{path}: the file is empty; a header row naming the columns is required")
    if column not in header:
        raise _no_column(f"{path}: line 1: the header row", column, header)
    unique_names.check_header(f"{path}: line 1", header, among=[column])  # another column may be (two unnamed)
    col, index, bad = header.index(column), 0, False
    # index = data row, from 0 after the header; blank lines are not rows
    for row in iter(next_row, None):
        if not row:
            continue
        if len(row) <= col:
            raise DataError(
                f"{path}: line {reader.line_num}: the row has {len(row)} fields but the header has "
                f"{len(header)}; check the delimiter and quoting"
            )
        if not bad:
            yield index, row[col]
        index, bad = index + 1, False


def _read_columnar(path: Path, column: str, dec: Decoder, rows: Callable[..., Iterator[tuple[int, Any]]]
                   ) -> Iterator[tuple[int, str]]:
    for row, value in rows(path, column, _no_column):
        if isinstance(value, bytes):  # a binary column holds text that was never decoded
            value = dec(value, f"row {row}")
        yield row, _as_text(value, f"{path}: row {row}", column)


def _open_hub(spec: str, config: str | None, split: str, column: str) -> Any:
    offline = offline_variable()
    if offline:
        raise _hub_unreachable(spec, f"{offline}={os.environ[offline]} is set")
    probe_hub(spec)
    import datasets  # deferred: heavy, and only hub ids need it

    try:
        ds = datasets.load_dataset(spec, config, split=split, streaming=True)
    except Exception as e:
        if type(e).__name__ == "DatasetNotFoundError":
            raise DataError(
                f"{spec!r} is neither a local path nor a dataset on the Hugging Face Hub (or it is gated and "
                "you are not logged in); check the path or the hub id, or log in with `hf auth login`"
            ) from e
        if is_network_error(e):
            raise _hub_unreachable(spec, f"{type(e).__name__}: {e}") from e
        if isinstance(e, (ValueError, FileNotFoundError)):  # e.g. a wrong config or split name, no data files
            message = " ".join(str(e).split())
            raise DataError(f"Hugging Face dataset {spec!r}: {message}; see --hf-config / --hf-split") from e
        raise
    names = getattr(ds, "column_names", None)  # None when the hub has no schema for the dataset
    if names is not None and column not in names:
        raise _no_column(f"Hugging Face dataset {spec!r}", column, names)
    return ds


def _iter_hub(spec: str, ds: Iterable[dict[str, Any]], column: str) -> Iterator[Document]:
    source = f"hf:{spec}"
    try:
        for row, record in enumerate(ds):
            where = f"Hugging Face dataset {spec!r}: row {row}"
            if column not in record:
                raise _no_column(where, column, record)
            if text := _as_text(record[column], where, column).strip():
                yield Document(id=f"{spec}:{row}", source=source, text=text)
    except DataError:
        raise
    except Exception as e:
        if is_network_error(e):
            raise _hub_unreachable(spec, f"connection lost while streaming: {type(e).__name__}: {e}") from e
        raise
