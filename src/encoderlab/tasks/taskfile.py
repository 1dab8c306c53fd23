"""Task YAML files, strictly typed, and the content identity of every task.

A task YAML names its family, its files (relative to the YAML) and its columns; anything else is refused, naming the
key and the keys allowed (docs/evaluation.md):

    name: bbc-sport          # optional: letters, digits, - _ . (default: the YAML file's name without .yaml)
    family: classification   # a registered family (tasks/registry.py): classification, tokens, qa, retrieval
    train: train.csv
    ...

A task's *fingerprint* is a hash of what decides its results: its definition (the YAML's settings, or the offline
task's task.json, or the paper dataset's hub id) and the SHA-256 of each of its data files. Records are stored and
found by task name and fingerprint, so edited data or another definition under the same name can never reuse
results (finetuning/records.py). Each file is hashed once per process (a memo keyed by its size and mtime).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from encoderlab.core.arguments import ConfigPath
from encoderlab.core.config import load_yaml, validate
from encoderlab.core.errors import DataError, given_as, resolved
from encoderlab.core.io import file_digest
from encoderlab.tasks.registry import family as family_record

SAFE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a task (it names the folder of its records, beside the protocol's summary.json)."""
    if not re.fullmatch(SAFE_NAME, name):
        return "a task name is letters, digits, '-', '_' and '.', starting with a letter or digit"
    if name == "summary.json":
        return "summary.json is the name of the sweep's summary, beside the task folders: choose another"
    return None


class TaskFileSettings(BaseModel):
    """What every task file holds; a family's own model (its record's `settings`, tasks/families/) adds `family:
    Literal[its name]`, its files and its columns."""
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, max_length=100)

    @field_validator("name")
    @classmethod
    def _safe(cls, name: str | None) -> str | None:
        if name is not None and (problem := name_problem(name)):
            raise ValueError(problem)
        return name


class SplitFiles(TaskFileSettings):
    """A task file of split files: train, validation and, optionally, test."""
    train: ConfigPath
    validation: ConfigPath
    test: ConfigPath | None = Field(None, description="without it, validation is the test set and 5% of train "
                                    "validation")


FILE_KEYS = ("train", "validation", "test", "folder")


@dataclass(frozen=True)
class TaskFile:
    """A validated task YAML: its settings, its files resolved against its folder, and its identity."""
    path: Path
    settings: TaskFileSettings
    files: dict[str, Path]  # train/validation/test or folder -> path

    @property
    def name(self) -> str:
        return self.settings.name or self.path.stem

    @property
    def family(self) -> str:
        return self.settings.family  # type: ignore[attr-defined]

    def split_files(self) -> tuple[str | None, str | None, str | None]:
        """(train, validation, test) as paths, None for a file the task file does not name."""
        return tuple(str(self.files[k]) if k in self.files else None  # type: ignore[return-value]
                     for k in ("train", "validation", "test"))

    def fingerprint(self) -> str:
        settings = self.settings.model_dump(exclude={"name", *FILE_KEYS})
        data = {role: (folder_digests(p) if role == "folder" else file_digest(p)) for role, p in self.files.items()}
        reading = family_record(self.family).reading
        return fingerprint({"task file": settings, "files": data, **(reading(self) if reading else {})})

    @property
    def trains_on_own_qrels(self) -> bool:
        """Whether it names a folder (retrieval's BEIR layout) that has train qrels: it trains on them by default."""
        return "folder" in self.files and (self.files["folder"] / "qrels" / "train.tsv").is_file()


def read_task_file(path: Path, builtin: Callable[[str], str] = lambda name: "") -> TaskFile:
    """A task YAML, validated by its family's schema; every file it names must exist. `builtin(name)`: what a name
    is among the built-in tasks ("the offline task"), or "": a missing `rt-polarity.yaml` is mostly that task asked
    for as a file, and the refusal says so."""
    where = f"task file {path}"
    if not path.is_file():  # said as a task file, not as load_yaml's config file
        if path.is_dir():
            raise DataError(f"{where} is a folder: give a task YAML file")
        known = builtin(path.stem)
        hint = f"; {path.stem!r}, without {path.suffix}, is {known} of that name" if known else ""
        raise DataError(f"{given_as(path)}task file not found: {resolved(path)}{hint}")
    data = load_yaml(path)
    if not isinstance(data.get("family"), str):
        raise DataError(f"{where}: family: missing or not a name; give one of the registered families")
    try:
        record = family_record(data["family"])
    except DataError as e:
        raise DataError(f"{where}: family: {e}") from None
    settings = validate(record.settings, data, where)
    files = {k: path.parent / v for k in FILE_KEYS if (v := getattr(settings, k, None)) is not None}
    for key, file in files.items():
        if not (file.is_dir() if key == "folder" else file.is_file()):
            shown = resolved(file, getattr(settings, key), f"the task file's folder, {path.parent.absolute()}")
            wanted = "a folder" if key == "folder" else "a file"
            what = ("does not exist" if not file.exists() else "is a file" if file.is_file() else "is a folder"
                    if file.is_dir() else "is neither a file nor a folder (a device, a pipe or a socket)")
            raise DataError(f"{where}: {key}: {shown} {what}; give {wanted}")
    if settings.name is None and (problem := name_problem(path.stem)):
        raise DataError(f"{where}: the task is named after its file, {path.stem!r}, but {problem}; give it a name:")
    if record.check_file is not None:
        record.check_file(settings, where)
    return TaskFile(path, settings, files)


# ---------------------------------------------------------------------------------------- identity

def folder_digests(folder: Path, names: list[str] | None = None) -> dict[str, str]:
    """{relative path: SHA-256} of `names` in a folder, or of every file under it (hidden ones left out)."""
    paths = ([folder / n for n in names] if names is not None else
             sorted(p for p in folder.rglob("*") if p.is_file() and not any(
                 part.startswith(".") for part in p.relative_to(folder).parts)))
    return {str(p.relative_to(folder)): file_digest(p) for p in paths}


def fingerprint(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def offline_fingerprint(folder: Path, data_files: tuple[str, ...]) -> str:
    """An offline task by its task.json and data files (its family record's `data_files`)."""
    return fingerprint({"offline": folder_digests(folder, ["task.json", *data_files])})


def paper_fingerprint(name: str, source: str | None, train_pairs: str | None = None) -> str:
    """A local copy by its files; a hub dataset by its id (the default one of `name` when `source` is None; a
    local copy pins the content, which a hub dataset's id alone does not), and that of its training pairs if any."""
    local = Path(source).expanduser() if source else None
    if local is not None and local.exists():
        files = folder_digests(local) if local.is_dir() else {local.name: file_digest(local)}
        return fingerprint({"paper": name, "files": files})
    return fingerprint({"paper": name, "hub": source, **({"train_pairs": train_pairs} if train_pairs else {})})

