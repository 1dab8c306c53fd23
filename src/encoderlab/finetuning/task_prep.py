"""Tasks built for a sweep, each said in one line as it is ready: its size, steps, what max_length cut, where its
evaluation splits came from, its baselines, and any note its loader made (tasks/base.py `notes`)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import planned_steps
from encoderlab.tasks import baselines
from encoderlab.tasks.base import EvalTask
from encoderlab.tasks.build import build_tasks


def prepare_tasks(specs: list[str], tokenizer, protocol: Protocol, *, cache_dir: Path | None,
                  log: Callable[[str], None]) -> list[EvalTask]:
    """Every task built whole (tasks/build.py: all loaded before any is prepared), each said as it is ready."""
    def said(task: EvalTask, seconds: float) -> None:
        own = protocol.for_task(task.name)
        what = f" over {task.scheme} tags" if task.scheme else ""
        what += f", {len(task.labels)} classes" if task.family == "classification" and task.labels else ""
        log(f"{task.name} ({task.family}, {task.metric}{what}): {task.num_train_examples():,} {task.train_unit}, "
            f"{planned_steps(task, own)} steps per run, prepared in {seconds:.1f}s; "
            f"cut at {own.length_for(task.family)} tokens: {truncation(task)}{answers_lost(task)}{halved(task)}; "
            "baselines on test: "
            + ", ".join(f"{baselines.LABELS[b]} {s['score']:.2f}" for b, s in task.baseline_scores["test"].items()))
        for note in task.notes:
            log(note)

    return build_tasks(specs, protocol, tokenizer, cache_dir=cache_dir, each=said)


def answers_lost(task: EvalTask) -> str:
    if (lost := task.answers_lost()) is None:
        return ""
    return "; answers cut off (labelled no answer): " + ", ".join(f"{n:,} of {s}" for s, n in lost.items())


def halved(task: EvalTask) -> str:
    """Retrieval with one evaluation split (tasks/retrieval_loaders.py evaluation_splits): where validation and test
    came from."""
    note = task.data_split
    if not note:
        return ""
    return (f"; validation and test: {note['validation']} ({note['queries']['validation']:,}) and the other half "
            f"({note['queries']['test']:,}), seed {note['seed']}")


def truncation(task: EvalTask) -> str:
    """`12 of train, 0 of validation, 3 of test examples`: what prepare() cut at max_length, said, never silent."""
    return ", ".join(f"{n:,} of {part}" for part, n in task.truncated.items()) + f" {task.truncation_unit}"
