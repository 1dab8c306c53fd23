"""Find a task by name: an offline task, one of the paper's datasets (hub id or local copy), or a user's YAML.

    rt-polarity                   an offline task (from `encoderlab data prepare offline`)
    sst2, mnli, qqp, conll2003, ontonotes, uner, squad, squad_v2, record, qed, msmarco, nq, mldr
    squad=/data/squad             the same, from a local copy in the hub schema
    my-task.yaml                  a user dataset: family + files + columns (taskfile.py, docs/evaluation.md)
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from encoderlab.core.errors import DataError
from encoderlab.core.io import encoderlab_home
from encoderlab.data.offline.taskfiles import FAMILIES, read_task, task_names
from encoderlab.tasks.base import EvalTask
from encoderlab.tasks.taskfile import (
    ClassificationFile,
    TaskFile,
    TokensFile,
    offline_fingerprint,
    paper_fingerprint,
    read_task_file,
)

PAPER_TASKS = {
    "sst2": "classification", "mnli": "classification", "qqp": "classification",
    "conll2003": "tokens", "ontonotes": "tokens", "uner": "tokens",
    "squad": "qa", "squad_v2": "qa", "record": "qa", "qed": "qa",  # qed: the authors' fourth QA set
    "msmarco": "retrieval", "nq": "retrieval", "mldr": "retrieval",
}


def offline_root() -> Path:
    return encoderlab_home() / "data" / "offline" / "tasks"


def offline_task_names(root: Path | None = None) -> list[str]:
    return task_names(root or offline_root())


def expand_specs(specs: list[str]) -> list[str]:
    """The task specs a sweep runs: 'offline' stands for every prepared offline task, and is refused when none is
    prepared (the other tasks would run alone, without a word that the offline ones were left out)."""
    if not specs:
        raise DataError("no task given: name tasks, paper datasets, task YAML files or 'offline'")
    offline = offline_task_names() if "offline" in specs else []
    if "offline" in specs and not offline:
        raise DataError(f"task 'offline': no offline task is prepared under {offline_root()}; run `encoderlab data "
                        "prepare offline` first")
    return [name for spec in specs for name in (offline if spec == "offline" else [spec])]


def load_task(spec: str, *, root: Path | None = None, holdout: str = "encoderlab") -> EvalTask:
    """The task a spec names, with its identity: `task.name` and `task.fingerprint` (records are kept by both).
    `holdout`: how a task whose test labels are hidden draws its validation set (the protocol's, split_validation)."""
    name, fingerprint, load = _resolve(spec, root, holdout)
    task = load()
    task.name, task.fingerprint = name, fingerprint
    task.own_train_split = trains_on_its_own(spec)
    return task


def trains_on_its_own(spec: str) -> bool:
    """Whether `spec` is a user's own retrieval task (a task file) whose folder has train qrels: it trains on them by
    default. The protocol's `retrieval.train_on` names a task of encoderlab's suites, which a user's own set should
    neither need prepared nor be trained on in place of its own pairs."""
    name = spec.partition("=")[0]
    if not name.endswith((".yaml", ".yml")):
        return False
    file = read_task_file(Path(name))
    return file.family == "retrieval" and (file.files["folder"] / "qrels" / "train.tsv").is_file()


def task_identity(spec: str, *, root: Path | None = None) -> tuple[str, str]:
    """(name, fingerprint) of the task a spec names, without loading its data (its files are hashed once)."""
    name, fingerprint, _ = _resolve(spec, root)
    return name, fingerprint


def default_hub_id(name: str) -> str:
    """The Hub dataset a paper task reads without a local copy: part of its identity, so that records made from
    another default dataset are never taken for this one's."""
    from encoderlab.tasks import classification, loaders, tokens

    ids = {**dict.fromkeys(("sst2", "mnli", "qqp"), classification.GLUE_HUB), **loaders.HUB, **loaders.HUB_IDS,
           **{task: hub for task, (hub, _) in tokens.CONLL_HUB.items()}}
    return ids[name]


def task_family(spec: str, *, root: Path | None = None) -> str:
    """The family of the task a spec names, read from its definition (no data is loaded or hashed)."""
    name = spec.partition("=")[0]
    if name in PAPER_TASKS:
        return PAPER_TASKS[name]
    if name.endswith((".yaml", ".yml")):
        return read_task_file(Path(name)).family
    root = root or offline_root()
    if (root / name / "task.json").exists():
        return read_task(root, name)[1]["family"]
    return _resolve(spec, root)[0]  # unknown: _resolve says so, in one line


def _resolve(spec: str, root: Path | None, holdout: str = "encoderlab") -> tuple[str, str, Callable[[], EvalTask]]:
    name, _, source = spec.partition("=")
    if name in PAPER_TASKS:
        from encoderlab.tasks.loaders import HUB_TRAIN_PAIRS  # msmarco's, from the Hub

        return name, paper_fingerprint(name, source or default_hub_id(name), HUB_TRAIN_PAIRS.get(name)), \
            lambda: _paper_task(name, source or None, holdout)
    if name.endswith((".yaml", ".yml")):
        file = read_task_file(Path(name))
        return file.name, file.fingerprint(), lambda: _user_task(file, holdout)
    root = root or offline_root()
    if (root / name / "task.json").exists():
        folder, meta = read_task(root, name)
        return name, offline_fingerprint(folder, meta["family"]), lambda: _offline_task(root, name, meta["family"])
    available = offline_task_names(root)
    hint = ("offline: " + ", ".join(available)) if available else "none offline (`encoderlab data prepare offline`)"
    raise DataError(f"unknown task {spec!r}; known: {hint}; paper: {', '.join(PAPER_TASKS)}; or a task YAML file")


def _offline_task(root: Path, name: str, family: str) -> EvalTask:
    if family == "classification":
        from encoderlab.tasks.classification import load_offline_classification

        return load_offline_classification(root, name)
    if family == "tokens":
        from encoderlab.tasks.tokens import load_offline_tokens

        return load_offline_tokens(root, name)
    if family == "qa":
        from encoderlab.tasks.qa import load_offline_qa

        return load_offline_qa(root, name)
    if family == "retrieval":
        from encoderlab.tasks.loaders import load_offline_retrieval

        return load_offline_retrieval(root, name)
    raise DataError(f"{root / name}/task.json names family {family!r}; known: {', '.join(FAMILIES)}")


def _paper_task(name: str, source: str | None, holdout: str) -> EvalTask:
    family = PAPER_TASKS[name]
    if family == "classification":
        from encoderlab.tasks.classification import load_glue

        return load_glue(name, source, holdout)  # type: ignore[arg-type]
    if family == "tokens":
        from encoderlab.tasks.tokens import load_conll_like

        return load_conll_like(name, source)  # type: ignore[arg-type]
    if family == "qa":
        from encoderlab.tasks.loaders import load_hub_qa

        return load_hub_qa(name, source, holdout)  # type: ignore[arg-type]
    from encoderlab.tasks.loaders import load_hub_retrieval

    return load_hub_retrieval(name, source)  # type: ignore[arg-type]


def _user_task(file: TaskFile, holdout: str) -> EvalTask:
    """The task of a validated task YAML (taskfile.py): the loader of its family, its files and columns."""
    settings, files = file.settings, {k: str(v) for k, v in file.files.items()}
    split_files = (files.get("train"), files.get("validation"), files.get("test"))
    if isinstance(settings, ClassificationFile):
        from encoderlab.tasks.classification import load_user_classification

        return load_user_classification(*split_files, settings.text_column, settings.label_column,  # type: ignore[arg-type]
                                        name=file.name, holdout=holdout)
    if isinstance(settings, TokensFile):
        from encoderlab.tasks.tokens import load_conll_columns

        return load_conll_columns(*split_files, word_column=settings.word_column,  # type: ignore[arg-type]
                                  tag_column=settings.tag_column, name=file.name, scheme=settings.tag_scheme)
    if file.family == "qa":
        from encoderlab.tasks.qa import load_squad_json

        return load_squad_json(*split_files, name=file.name, holdout=holdout)  # type: ignore[arg-type]
    from encoderlab.tasks.loaders import load_beir

    return load_beir(files["folder"], file.name)
