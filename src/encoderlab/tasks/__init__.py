"""Find a task by name: an offline task, one of the paper's datasets (hub id or local copy), or a user's YAML.

    rt-polarity                   an offline task (from `encoderlab data prepare offline`)
    sst2, mnli, qqp, conll2003, ontonotes, uner, squad, squad_v2, record, qed, msmarco, nq, mldr
    squad=/data/squad             the same, from a local copy in the hub schema
    my-task.yaml                  a user dataset: family + files + columns (taskfile.py, docs/evaluation.md)
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path, PurePath

from encoderlab.core.errors import DataError, prepare_command
from encoderlab.core.io import encoderlab_home
from encoderlab.data.offline import SUITE_TASKS
from encoderlab.data.offline.taskfiles import read_task, task_names
from encoderlab.tasks.base import EvalTask
from encoderlab.tasks import registry
from encoderlab.tasks.registry import Family
from encoderlab.tasks.taskfile import TaskFile, name_problem, offline_fingerprint, paper_fingerprint, read_task_file


def paper_tasks() -> dict[str, str]:
    """{dataset: family} of the paper's datasets, as the registered families own them."""
    return {name: record.name for record in registry.families() for name in record.paper}


def offline_root() -> Path:
    return encoderlab_home() / "data" / "offline" / "tasks"


def offline_task_names(root: Path | None = None) -> list[str]:
    return task_names(root or offline_root())


def unprepared_offline(name: str, root: Path | None = None) -> str:
    """Why `name` reads no task where it is one of the offline suite's tasks not prepared under `root` (none of the
    suite yet, or a suite built without it): the command that prepares it; "" for any other name."""
    root = root or offline_root()
    if name not in SUITE_TASKS or (root / name / "task.json").exists():
        return ""
    out = None if root == offline_root() else root.parent  # prepare writes OUT/tasks/NAME
    return (f"task {name!r} is one of the offline suite's tasks, not prepared under {root}: prepare the suite with "
            f"`{prepare_command('offline', out)}`")


def expand_specs(specs: list[str]) -> list[str]:
    """The task specs a sweep runs: 'offline' stands for every prepared offline task, and is refused when none is
    prepared (the other tasks would run alone, without a word that the offline ones were left out)."""
    if not specs:
        raise DataError("no task given: name tasks, paper datasets, task YAML files or 'offline'")
    offline = offline_task_names() if "offline" in specs else []
    if "offline" in specs and not offline:
        raise DataError(f"task 'offline': no offline task is prepared under {offline_root()}; run "
                        f"`{prepare_command('offline')}` first")
    out = [name for spec in specs for name in (offline if spec == "offline" else [spec])]
    for spec in out:
        split_spec(spec)
    return out


def split_spec(spec: str) -> tuple[str, str]:
    """(name, source) of a task spec, refused in one line unless it is a task file (.yaml, .yml), a plain task name,
    or a paper dataset with its local copy (`squad=DIR`): a name becomes a folder (offline tasks are read from
    `offline_root()/NAME`, records are written under `--out/.../NAME`), so a path there would read or write
    elsewhere, and a `=PATH` after anything but a paper dataset would be dropped unread."""
    name, eq, source = spec.partition("=")
    if name.endswith((".yaml", ".yml")) or registry.paper_family(name) is not None:
        if eq and registry.paper_family(name) is None:
            raise DataError(f"task {spec!r}: a task file takes no =PATH (it names its own files); =PATH gives a local "
                            f"copy of one of the paper's datasets only ({', '.join(paper_tasks())}), e.g. squad=DIR")
        if eq and not source.strip():  # `squad=` with the path left out would read as `squad`: another dataset
            raise DataError(f"task {spec!r}: nothing after '=': give the local copy ({name}=DIR) or a Hub id, or the "
                            f"name alone ({name})")
        return name, source
    if eq:
        raise DataError(f"task {spec!r}: {name!r} is not one of the paper's datasets, the only tasks that take =PATH "
                        f"(a local copy: {', '.join(paper_tasks())}); give an offline task by its name alone, or "
                        "your own data as a task file (.yaml)")
    if problem := name_problem(name):
        last = PurePath(name).name  # `./rt-polarity`, `rt-polarity/`: what a shell completes inside the tasks folder
        hint = f" (by name: {last!r})" if last and last != name and not name_problem(last) else ""
        raise DataError(f"task {spec!r}: neither a task file (.yaml, .yml) nor a task name ({problem}); give an "
                        f"offline task or a paper dataset by its name{hint}, or your own data through a task file")
    return name, source


PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")  # written as a path, whether or not it exists yet


def is_local_source(source: str, base: Path | None = None) -> bool:
    """Whether a paper dataset's `=SOURCE` names a local copy rather than a Hub id (`rajpurkar/squad_v2`). The loaders
    read it as a local copy when it exists, else from the Hub; a study file, whose paths are relative to its folder
    (`base`), asks the same of that folder, and takes a source written as a path (`./x`, `../x`, `/x`, `~/x`) as one
    even before it exists, so that the loader names the missing folder."""
    if source.startswith(PATH_PREFIXES) or source in (".", ".."):
        return True
    path = Path(source).expanduser()
    return (base / path if base is not None else path).exists()


def load_task(spec: str, *, root: Path | None = None, holdout: str = "encoderlab") -> EvalTask:
    """The task a spec names, made with its identity: `task.name` and `task.fingerprint` (records are kept by both)
    and, for a user's retrieval set, `task.own_train_split`. `holdout`: how a task whose test labels are hidden draws
    its validation set (the protocol's, split_validation)."""
    name, fingerprint, load = _resolve(spec, root, holdout)
    task = load(fingerprint)
    if (task.name, task.fingerprint) != (name, fingerprint):  # a family's loader that dropped what it was given
        raise DataError(f"task {spec!r}: its family's loader made task {task.name!r} with fingerprint "
                        f"{task.fingerprint!r}, not {name!r} with {fingerprint!r}")
    return task


def trains_on_its_own(spec: str) -> bool:
    """Whether `spec` is a user's own task file naming a folder (retrieval's BEIR layout) that has train qrels: it
    trains on them by default. The protocol's `retrieval.train_on` names a task of encoderlab's
    suites, which a user's own set should neither need prepared nor be trained on in place of its own pairs."""
    name = split_spec(spec)[0]
    return name.endswith((".yaml", ".yml")) and _task_file(name).trains_on_own_qrels


def task_identity(spec: str, *, root: Path | None = None) -> tuple[str, str]:
    """(name, fingerprint) of the task a spec names, without loading its data (its files are hashed once)."""
    name, fingerprint, _ = _resolve(spec, root)
    return name, fingerprint


def default_hub_id(name: str) -> str:
    """The Hub dataset a paper task reads without a local copy: part of its identity, so that records made from
    another default dataset are never taken for this one's."""
    return _paper(name).paper[name]


def task_family(spec: str, *, root: Path | None = None) -> str:
    """The family of the task a spec names, read from its definition (no data is loaded or hashed)."""
    name = split_spec(spec)[0]
    if (owner := registry.paper_family(name)) is not None:
        return owner.name
    if name.endswith((".yaml", ".yml")):
        return _task_file(name, root).family
    root = root or offline_root()
    if (root / name / "task.json").exists():
        return _offline(root, name)[1].name
    return _resolve(spec, root)[0]  # unknown: _resolve says so, in one line


def _task_file(name: str, root: Path | None = None) -> TaskFile:
    """A task file, refused when missing with a hint where its name without .yaml is a built-in task."""
    def builtin(stem: str) -> str:
        if registry.paper_family(stem) is not None:
            return "the paper's dataset"
        return "the offline task" if stem in SUITE_TASKS or stem in offline_task_names(root) else ""
    return read_task_file(Path(name), builtin)


def _paper(name: str) -> Family:
    owner = registry.paper_family(name)
    if owner is None or owner.load_paper is None:
        raise DataError(f"unknown paper dataset {name!r}; known: {', '.join(paper_tasks())}")
    return owner


def _offline(root: Path, name: str) -> tuple[Path, Family]:
    """An offline task's folder and family, refused in one line when its family is unknown or has no offline form."""
    folder, meta = read_task(root, name, files_of=lambda f: registry.family(f).data_files)
    record = registry.family(meta["family"])
    if record.load_offline is None:
        raise DataError(f"offline task {name!r} ({folder / 'task.json'}): family {record.name!r} has no offline "
                        "task folders")
    return folder, record


def _resolve(spec: str, root: Path | None, holdout: str = "encoderlab"
             ) -> tuple[str, str, Callable[[str], EvalTask]]:
    """(name, fingerprint, the loader that makes the task given its fingerprint)."""
    name, source = split_spec(spec)
    if (owner := registry.paper_family(name)) is not None and owner.load_paper is not None:
        fingerprint = paper_fingerprint(name, source or owner.paper[name], owner.train_pairs.get(name))
        return name, fingerprint, lambda fp: owner.load_paper(name, source or None, holdout,  # type: ignore[misc]
                                                              fingerprint=fp)
    if name.endswith((".yaml", ".yml")):
        file = _task_file(name, root)
        return (file.name, file.fingerprint(),
                lambda fp: registry.family(file.family).load_user(file, holdout, fingerprint=fp))
    root = root or offline_root()
    if (root / name / "task.json").exists():
        folder, record = _offline(root, name)
        return (name, offline_fingerprint(folder, record.data_files),
                lambda fp: record.load_offline(root, name, fingerprint=fp))  # type: ignore[misc]
    if unprepared := unprepared_offline(name, root):
        raise DataError(unprepared)
    if not source and Path(name).exists():  # a task's data where its task file goes
        what = "a folder" if Path(name).is_dir() else "a file"
        raise DataError(f"task {spec!r}: {Path(name).resolve()} is {what} of data, not a task: give a task YAML file "
                        "that names it (family, train, validation, ...: docs/evaluation.md#tasks), an offline task or "
                        "a paper dataset")
    available = offline_task_names(root)
    hint = ("offline: " + ", ".join(available)) if available else f"none offline (`{prepare_command('offline')}`)"
    close = difflib.get_close_matches(name, [*available, *SUITE_TASKS, *paper_tasks()], n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    raise DataError(f"unknown task {spec!r}{guess}; known: {hint}; paper: {', '.join(paper_tasks())}; or a task "
                    "YAML file")
