"""Find a task by name: an offline task, one of the paper's datasets (hub id or local copy), or a user's YAML.

    rt-polarity                   an offline task (from `encoderlab data prepare offline`)
    sst2, mnli, qqp, conll2003, ontonotes, uner, squad, squad_v2, record, msmarco, nq, mldr
    squad=/data/squad             the same, from a local copy in the hub schema
    my-task.yaml                  a user dataset: family + files + columns (docs/evaluation.md)
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.config import load_yaml
from encoderlab.io import encoderlab_home
from encoderlab.errors import DataError
from encoderlab.data.offline.taskfiles import FAMILIES, read_task, task_names
from encoderlab.evaluation.tasks.base import EvalTask

PAPER_TASKS = {
    "sst2": "classification", "mnli": "classification", "qqp": "classification",
    "conll2003": "tokens", "ontonotes": "tokens", "uner": "tokens",
    "squad": "qa", "squad_v2": "qa", "record": "qa",
    "msmarco": "retrieval", "nq": "retrieval", "mldr": "retrieval",
}


def offline_root() -> Path:
    return encoderlab_home() / "data" / "offline" / "tasks"


def offline_task_names(root: Path | None = None) -> list[str]:
    return task_names(root or offline_root())


def load_task(spec: str, *, root: Path | None = None) -> EvalTask:
    name, _, source = spec.partition("=")
    if name in PAPER_TASKS:
        return _paper_task(name, source or None)
    if name.endswith((".yaml", ".yml")):
        return _user_task(Path(name))
    root = root or offline_root()
    folder = root / name
    if (folder / "task.json").exists():
        _, meta = read_task(root, name)
        return _offline_task(root, name, meta["family"])
    available = offline_task_names(root)
    hint = ("offline: " + ", ".join(available)) if available else "none offline (`encoderlab data prepare offline`)"
    raise DataError(f"unknown task {spec!r}; known: {hint}; paper: {', '.join(PAPER_TASKS)}; or a task YAML file")


def _offline_task(root: Path, name: str, family: str) -> EvalTask:
    if family == "classification":
        from encoderlab.evaluation.tasks.classification import load_offline_classification

        return load_offline_classification(root, name)
    if family == "tokens":
        from encoderlab.evaluation.tasks.tokens import load_offline_tokens

        return load_offline_tokens(root, name)
    if family == "qa":
        from encoderlab.evaluation.tasks.qa import load_offline_qa

        return load_offline_qa(root, name)
    if family == "retrieval":
        from encoderlab.evaluation.tasks.loaders import load_offline_retrieval

        return load_offline_retrieval(root, name)
    raise DataError(f"{root / name}/task.json names family {family!r}; known: {', '.join(FAMILIES)}")


def _paper_task(name: str, source: str | None) -> EvalTask:
    family = PAPER_TASKS[name]
    if family == "classification":
        from encoderlab.evaluation.tasks.classification import load_glue

        return load_glue(name, source)  # type: ignore[arg-type]
    if family == "tokens":
        from encoderlab.evaluation.tasks.tokens import load_conll_like

        return load_conll_like(name, source)  # type: ignore[arg-type]
    if family == "qa":
        from encoderlab.evaluation.tasks.loaders import load_hub_qa

        return load_hub_qa(name, source)  # type: ignore[arg-type]
    from encoderlab.evaluation.tasks.loaders import load_hub_retrieval

    return load_hub_retrieval(name, source)  # type: ignore[arg-type]


def _user_task(path: Path) -> EvalTask:
    """family: classification|tokens|qa|retrieval, plus the files and columns of that family."""
    spec = load_yaml(path)
    family = spec.pop("family", None)
    where = f"task file {path}"
    base = path.parent

    def file(key: str, required: bool = True) -> str | None:
        value = spec.get(key)
        if value is None:
            if required:
                raise DataError(f"{where}: missing {key!r}")
            return None
        return str(base / value)

    if family == "classification":
        from encoderlab.evaluation.tasks.classification import load_user_classification

        return load_user_classification(file("train"), file("validation"), file("test", False),  # type: ignore[arg-type]
                                        spec.get("text_column", "text"), spec.get("label_column", "label"))
    if family == "tokens":
        from encoderlab.evaluation.tasks.tokens import load_conll_columns

        return load_conll_columns(file("train"), file("validation"), file("test", False),  # type: ignore[arg-type]
                                  word_column=spec.get("word_column", 0), tag_column=spec.get("tag_column", -1))
    if family == "qa":
        from encoderlab.evaluation.tasks.qa import load_squad_json

        return load_squad_json(file("train"), file("validation"), file("test", False))  # type: ignore[arg-type]
    if family == "retrieval":
        from encoderlab.evaluation.tasks.loaders import load_beir

        return load_beir(file("folder"))  # type: ignore[arg-type]
    raise DataError(f"{where}: 'family' must be one of {', '.join(FAMILIES)}, got {family!r}")
