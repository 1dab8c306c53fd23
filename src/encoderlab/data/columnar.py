"""Columnar sources: Parquet files, and the Arrow files of a `datasets` folder written by `save_to_disk`.

Both are read a record batch at a time, one column only, so a corpus larger than memory streams. A folder that
`Dataset.save_to_disk` wrote holds its rows in `data-*.arrow` files (Arrow's streaming format) beside two JSON files
of its own (`state.json`, `dataset_info.json`) that are not corpus; `saved_dataset_metadata` names those so that a
folder read as a whole reads the rows alone. A `DatasetDict`'s folder holds one such folder per split: reading all of
them would put its test split into the pretraining corpus, so it is refused, naming the splits' folders.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from encoderlab.core import unique_names
from encoderlab.core.errors import DataError

Rows = Iterator[tuple[int, Any]]  # (row index, the column's value)


def parquet_rows(path: Path, column: str, no_column: Callable[[str, str, list], DataError]) -> Rows:
    import pyarrow as pa  # deferred: a large import that only columnar files need
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        _check_column(path, pf.schema_arrow.names, column, no_column)
        yield from _numbered(batch.column(0) for batch in pf.iter_batches(batch_size=1024, columns=[column]))
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Parquet file ({e})") from e


def arrow_rows(path: Path, column: str, no_column: Callable[[str, str, list], DataError]) -> Rows:
    """The rows of an Arrow IPC file, streaming format (what `datasets` writes) or random-access format."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            schema, batches = _arrow_batches(source)
            _check_column(path, schema.names, column, no_column)
            index = schema.get_field_index(column)
            yield from _numbered(batch.column(index) for batch in batches)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Arrow file ({e})") from e


def _check_column(path: Path, names: list[str], column: str, no_column: Callable[[str, str, list], DataError]) -> None:
    """The text column is there, and named once (which of two would be the text is a writer's accident)."""
    if column not in names:
        raise no_column(str(path), column, names)
    unique_names.check_header(str(path), names, among=[column])


def _arrow_batches(source) -> tuple[Any, Iterator[Any]]:
    import pyarrow as pa

    try:
        stream = pa.ipc.open_stream(source)
        return stream.schema, iter(stream)
    except pa.ArrowInvalid:  # not the streaming format: the random-access one has a footer to seek from
        source.seek(0)
        file = pa.ipc.open_file(source)
        return file.schema, (file.get_batch(i) for i in range(file.num_record_batches))


def _numbered(columns: Iterable[Any]) -> Rows:
    row = 0
    for values in columns:
        for value in values.to_pylist():
            yield row, value
            row += 1


def saved_dataset_metadata(paths: Iterable[Path]) -> set[Path]:
    """The `state.json` and `dataset_info.json` of each folder among `paths` that `save_to_disk` wrote (its state
    lists the folder's Arrow files): not corpus. Refuses a `DatasetDict` folder (its `dataset_dict.json`)."""
    paths = list(paths)
    skipped = set()
    for path in paths:
        if path.name == "dataset_dict.json" and (splits := _json(path).get("splits")):
            folders = ", ".join(str(path.parent / s) for s in splits)
            raise DataError(f"{path.parent} is a `datasets` DatasetDict saved with save_to_disk (splits "
                            f"{', '.join(map(str, splits))}); reading it whole would mix its splits into one "
                            f"corpus: give the folder of the split to pretrain on ({folders})")
        if path.name == "state.json" and isinstance(listed := _json(path).get("_data_files"), list):
            _check_listed(path, [str(f.get("filename")) for f in listed if isinstance(f, dict)], paths)
            skipped |= {path, path.parent / "dataset_info.json"}
    return skipped


def _check_listed(state: Path, listed: list[str], paths: list[Path]) -> None:
    """The Arrow files beside `state` are the ones it lists: save_to_disk into a used folder leaves the earlier
    save's shards there (load_from_disk reads the listed ones alone), and a lost shard would drop its rows."""
    folder = state.parent
    for path in paths:
        if path.parent == folder and path.suffix == ".arrow" and path.name not in listed:
            raise DataError(f"{path}: not one of the files {state} lists ({', '.join(listed)}), so not part of the "
                            "saved dataset (an earlier save_to_disk into this folder leaves its shards behind, and "
                            "load_from_disk does not read them): delete it, or save the dataset to an empty folder")
    for name in listed:
        if not (folder / name).is_file():
            raise DataError(f"{folder / name}, which its state.json lists, is missing: the saved dataset is "
                            "incomplete; save it again with save_to_disk")


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # not `datasets`' file: the reader of .json files says what is wrong with it
    return data if isinstance(data, dict) else {}
