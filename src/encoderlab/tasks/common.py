"""What the list-based task families share: a tokenisation cache, hold-out splits, offline/hub/local loading."""
from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from encoderlab.core.errors import DataError, resolved
from encoderlab.core.io import atomic_file, read_jsonl, utf8_lines
from encoderlab.core.unique_names import check_header
from encoderlab.data.hub_access import is_network_error, offline_variable, probe_hub
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.tasks.base import SPLITS

HOLDOUT_FRACTION = 0.05
HOLDOUT_SEED = 1234
CACHE_FORMAT = "encoderlab-task-cache-v1"  # bump when the encoding changes, so that old caches are not reused
_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")


@contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Switch modules to eval() for the block and restore their previous training flags afterwards."""
    flags = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, flag in zip(modules, flags):
            m.train(flag)


# ---------------------------------------------------------------------------------------- shared helpers


def check_splits(name: str, splits: dict[str, list[dict]]) -> None:
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise DataError(f"task {name!r}: missing split(s) {missing}; got {sorted(splits)}, need {list(SPLITS)}")
    empty = [s for s in SPLITS if not splits[s]]
    if empty:
        raise DataError(f"task {name!r}: split(s) {empty} have no examples")


def holdout(examples: list[dict], fraction: float = HOLDOUT_FRACTION,
            seed: int = HOLDOUT_SEED) -> tuple[list[dict], list[dict]]:
    """(rest, held out): a seeded `fraction` of the examples (at least one), both in their original order."""
    if len(examples) < 2:
        raise DataError(f"cannot hold out a validation set from {len(examples)} training example(s)")
    n_held = max(1, round(len(examples) * fraction))
    held = set(torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:n_held].tolist())
    return ([ex for i, ex in enumerate(examples) if i not in held], [ex for i, ex in enumerate(examples) if i in held])


Split = tuple[list[dict], list[dict]]


def split_validation(examples: list[dict], how: str, own: Callable[[list[dict]], Split] = holdout) -> Split:
    """(train, validation) of a training set whose task hides its test labels, as the protocol's `holdout` says:
    "encoderlab" is `own` (the family's seeded 5%), "train_test_split" the authors' split, `datasets`'
    `train_test_split(train_size=0.95, seed=42)` of the rows (datasets' own function: their split exactly)."""
    if how == "encoderlab":
        return own(examples)
    if len(examples) < 2:
        raise DataError(f"cannot hold out a validation set from {len(examples)} training example(s)")
    import datasets  # deferred: heavy

    parts = datasets.Dataset.from_dict({"row": list(range(len(examples)))}).train_test_split(train_size=0.95, seed=42)
    return [examples[i] for i in parts["train"]["row"]], [examples[i] for i in parts["test"]["row"]]


def content_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False).encode()).hexdigest()


def cached(cache_dir: Path | None, kind: str, name: str, tokenizer: TextTokenizer, max_length: int, data: str,
           build: Callable[[], dict]) -> dict:
    """A task's tokenised splits (a dict of tensors) from `build`, or from the cache file keyed by the task family,
    its name, the tokenizer, max_length and `data` (a fingerprint of the examples). The one tokenisation cache of
    every family: written atomically, read with `torch.load(weights_only=True)` (no arbitrary pickle); a
    truncated or foreign file is rebuilt rather than trusted."""
    if cache_dir is None:
        return build()
    h = hashlib.sha256()
    for part in (CACHE_FORMAT, kind, name, str(max_length), tokenizer.tokenizer.to_str(),
                 f"{tokenizer.bos_id},{tokenizer.eos_id},{tokenizer.pad_id}", data):
        h.update(part.encode() + b"\0")
    path = Path(cache_dir) / f"{kind}-{re.sub(r'[^A-Za-z0-9._-]', '_', name)}-{h.hexdigest()[:24]}.pt"
    try:
        obj = torch.load(path, weights_only=True) if path.exists() else None
    except Exception:
        obj = None
    if not isinstance(obj, dict):
        obj = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as tmp:
            torch.save(obj, tmp)
    return obj


def pack_lists(seqs: list[list[int]]) -> dict[str, Tensor]:
    """Ragged int lists as one flat tensor plus offsets (fast to save and load, unlike nested lists)."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    flat = torch.tensor([x for s in seqs for x in s], dtype=torch.int32)
    return {"flat": flat, "offsets": offsets}


def unpack_lists(packed: dict[str, Tensor]) -> list[list[int]]:
    flat, offsets = packed["flat"].tolist(), packed["offsets"].tolist()
    return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def read_table(path: str | Path) -> list[dict]:
    """Rows of a .csv / .tsv (header line) or .jsonl / .json (one object a line) file, as dicts."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"file not found: {resolved(path)}")
    if path.suffix in (".jsonl", ".json"):
        rows = list(read_jsonl(path))
    elif path.suffix in (".csv", ".tsv"):
        rows = _read_csv(path)
    else:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use .csv, .tsv, .jsonl or .json")
    if not rows:
        raise DataError(f"{path}: no rows (an empty file, or a header only)")
    return rows


def _read_csv(path: Path) -> list[dict]:
    csv.field_size_limit(2**31 - 1)  # as for a corpus (data/sources.py): a text may be longer than 128 KiB
    reader = csv.DictReader(utf8_lines(path), delimiter="\t" if path.suffix == ".tsv" else ",")
    rows = []
    try:
        header = reader.fieldnames or []
        check_header(f"{path}:{reader.line_num}", header)  # DictReader would keep the last of two, silently
        start = reader.line_num + 1  # the line a row starts on (a quoted field may span lines)
        for row in reader:
            # DictReader puts a row's extra fields under None and gives its missing ones None: a shifted column
            if None in row or None in row.values():
                found = sum(k is not None and v is not None for k, v in row.items()) + len(row.get(None) or [])
                raise DataError(f"{path}:{start}: {found} field(s) where the header has {len(header)} (a delimiter "
                                "in an unquoted field, or a quote left open?)")
            rows.append(row)
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: cannot be read as {path.suffix[1:]} ({e})") from None
    return rows


def load_hf_splits(source: str, config: str | None, wanted: dict[str, tuple[str, ...]],
                   schema: str) -> dict[str, Any]:
    """{our split: datasets.Dataset} from a local folder (files named after the splits) or a hub dataset.

    `wanted` maps our split names to the file/hub split names to look for, first match wins.
    """
    import datasets

    folder = Path(source).expanduser()
    if folder.is_dir():
        out = {}
        for ours, names in wanted.items():
            files = [folder / f"{n}{x}" for n in names for x in _SUFFIXES if (folder / f"{n}{x}").exists()]
            if not files:
                raise DataError(f"{folder}: no {ours} file; looked for {'/'.join(names)} with a suffix of "
                                f"{'/'.join(_SUFFIXES)} ({schema})")
            out[ours] = _read_local(files[0])
        return out
    if folder.exists():
        raise DataError(f"{folder} is a file; give a folder holding one file per split ({schema})")
    check_hub(source, schema)
    try:
        ds = datasets.load_dataset(source, config)
    except Exception as e:
        if is_network_error(e):
            raise _hub_error(source, f"{type(e).__name__}", schema) from e
        message = " ".join(str(e).split())[:300]
        raise DataError(f"{source!r} is neither a local folder nor a loadable hub dataset ({message}); "
                        f"a local copy can be given: a folder with one file per split ({schema})") from e
    out = {}
    for ours, names in wanted.items():
        name = next((n for n in names if n in ds), None)
        if name is None:
            raise DataError(f"hub dataset {source!r} has splits {list(ds)}, none of {list(names)}")
        out[ours] = ds[name]
    return out


def _read_local(file: Path) -> Any:
    import datasets

    kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet"}[file.suffix]
    extra: dict[str, Any] = {"keep_default_na": False} if kind == "csv" else {}  # "NA" and "null" are text here
    if file.suffix == ".tsv":
        extra.update(sep="\t", quoting=csv.QUOTE_NONE)  # GLUE's TSVs have unbalanced quotes
    try:
        return datasets.load_dataset(kind, data_files={"data": str(file)}, split="data", **extra)
    except Exception as e:
        raise DataError(f"{file}: cannot be read as {kind} ({' '.join(str(e).split())[:300]})") from e


def check_hub(source: str, schema: str) -> None:
    """Fail in seconds, not after huggingface_hub's retries, when the hub cannot be reached for `source`."""
    offline = offline_variable()
    if offline:
        raise _hub_error(source, f"{offline} is set", schema)
    try:
        probe_hub(source)
    except DataError as e:
        raise _hub_error(source, "no connection", schema) from e


def _hub_error(source: str, reason: str, schema: str) -> DataError:
    return DataError(f"{source!r} is not a local folder and the Hugging Face Hub is unreachable ({reason}); "
                     f"give a local copy in the same schema instead: a folder with one file per split ({schema})")


def column(ds: Any, name: str, where: str) -> list:
    if name not in ds.column_names:
        raise DataError(f"{where}: no column {name!r}; columns: {ds.column_names}")
    return list(ds[name])


# ---------------------------------------------------------------------------------------- loaders


def char_span_to_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Token indices (first, last) covering characters [start, end) given (N, 2) token offsets, or None."""
    first = int(np.searchsorted(offsets[:, 1], start, side="right"))  # first token ending after the start
    last = int(np.searchsorted(offsets[:, 0], end, side="left")) - 1  # last token starting before the end
    return (first, last) if 0 <= first <= last < len(offsets) else None
