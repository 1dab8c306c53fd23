"""The one task-file format of the offline suite: what the builders here write and the loaders of
tasks/ read.

A task folder `tasks/NAME/` holds `task.json` (name, family, description, recipe, ...), `stats.json`, and its data:
`{train,validation,test}.jsonl` for classification, tokens and QA; for retrieval the BEIR layout, `corpus.jsonl`,
`queries.jsonl` and `qrels/{train,validation,test}.tsv`. A folder is written atomically, so a task either has all
its files or does not exist.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from encoderlab.core.errors import DataError, prepare_command
from encoderlab.core.io import atomic_dir, write_json, write_jsonl

SPLITS = ("train", "validation", "test")


def data_files(family: str) -> list[str]:
    """The data files of a built-in family's task folder (tasks/ reads them from the family's record)."""
    if family == "retrieval":
        return ["corpus.jsonl", "queries.jsonl", *(f"qrels/{s}.tsv" for s in SPLITS)]
    return [f"{s}.jsonl" for s in SPLITS]


def write_task_folder(root: Path, meta: dict, stats: dict, splits: dict[str, list[dict]] | None = None,
                      write_data: Callable[[Path], None] | None = None) -> None:
    """`root/NAME`: task.json from `meta` (which names the task and its family), stats.json, and the data: the
    rows of each split as JSON lines, or whatever `write_data(folder)` writes (retrieval's BEIR files)."""
    if not isinstance(meta.get("family"), str) or not meta["family"]:  # tasks/registry.py knows which exist
        raise ValueError(f"task.json names its family, not {meta.get('family')!r}")
    with atomic_dir(root / meta["name"]) as tmp:
        for split, rows in (splits or {}).items():
            write_jsonl(tmp / f"{split}.jsonl", rows)
        if write_data is not None:
            write_data(tmp)
        write_json(tmp / "stats.json", stats)
        write_json(tmp / "task.json", meta)


def task_names(root: Path) -> list[str]:
    root = Path(root)
    return sorted(p.parent.name for p in root.glob("*/task.json")) if root.exists() else []


def read_task(root: Path, name: str, family: str | None = None,
              files_of: Callable[[str], Sequence[str]] = data_files) -> tuple[Path, dict]:
    """`root/NAME` (root = `.../offline/tasks`, or the `.../offline` folder above it) and its task.json, refused
    when it is missing, of another family than `family`, or lacks a data file. `files_of(family)`: the data files a
    folder of that family holds (tasks/ passes its family records', which refuse a family they do not know)."""
    root = Path(root)
    folder = next((f for f in (root / name, root / "tasks" / name) if (f / "task.json").exists()), None)
    if folder is None:
        known = task_names(root) or task_names(root / "tasks")
        raise DataError(f"no offline task {name!r} under {root} (known: {', '.join(known) or 'none'}); build the "
                        f"offline suite with `{prepare_command('offline')}`")
    meta = json.loads((folder / "task.json").read_text())
    if not isinstance(meta.get("family"), str) or (family is not None and meta["family"] != family):
        wanted = family or "a task family"
        raise DataError(f"offline task {name!r} is a {meta.get('family')!r} task ({folder / 'task.json'}), "
                        f"not {wanted}")
    missing = [f for f in files_of(meta["family"]) if not (folder / f).exists()]
    if missing:
        raise DataError(f"offline task {name!r}: {folder} lacks {', '.join(missing)}; build the offline suite "
                        f"again with `{prepare_command('offline')}`")
    return folder, meta
