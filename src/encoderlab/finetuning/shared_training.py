"""Retrieval trained once, scored on many sets (the authors' protocol, `retrieval.train_on`): one run per LR and seed
fine-tunes on the train pairs of one retrieval task and is scored on every retrieval task of the sweep, but a
user's own task file with train qrels, which trains on them (`tasks.trains_on_its_own`).

The one place that reads `retrieval.train_on`: which task trains (`trainer_spec`), what a sweep trains
(`training_units`) and how a study groups its evaluation jobs (`job_groups`). A sweep trains *units*: a task is the
unit of itself (`EvalTask.training_task`, `scored_tasks`, `bodies_by_task`), and `TrainedOnce` is the other kind, which
the engines train like a task (its batches, head and loss are the training task's), whose `evaluate` scores every
member and whose `bodies_by_task` turns the one run's record body into one body per member.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from torch import Tensor, nn

from encoderlab.core.errors import EncoderlabError
from encoderlab.tasks.base import EvalTask, record_scores
from encoderlab.tasks.retrieval import RetrievalTask


class TrainedOnce:
    family = "retrieval"
    labels = None  # retrieval has no label names

    def __init__(self, train: RetrievalTask, members: list[RetrievalTask]) -> None:
        self.training_task, self.scored_tasks = train, members
        self.metric, self.standard_metric = train.metric, train.standard_metric  # one protocol: the members' too
        self.name = train.name  # its protocol overrides (steps, batch, length) are the training task's

    def num_train_examples(self) -> int:
        return self.training_task.num_train_examples()

    def make_head(self, hidden_size: int, generator) -> nn.Module:
        return self.training_task.make_head(hidden_size, generator)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        return self.training_task.train_batches(batch_size, seed)

    def epoch_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        return self.training_task.epoch_batches(batch_size, seed)

    def loss(self, backbone: nn.Module, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return self.training_task.loss(backbone, head, batch)

    def evaluate(self, backbone: nn.Module, head: nn.Module, split: str, batch_size: int) -> dict:
        """Every member's metrics under "by_task"; "score" is their sum, only so that a non-finite one is seen."""
        by_task = {m.name: m.evaluate(backbone, head, split, batch_size) for m in self.scored_tasks}
        return {"score": math.fsum(m["score"] for m in by_task.values()), "by_task": by_task}

    def bodies_by_task(self, body: dict) -> dict[str, dict]:
        """The run's record body as one body per member: its own scores (a failed run fails for all)."""
        if body["status"] != "ok":
            return {m.name: body for m in self.scored_tasks}
        return {m.name: {**body, **record_scores({s: v["by_task"][m.name] for s, v in body["scores"].items()})}
                for m in self.scored_tasks}


Unit = EvalTask | TrainedOnce  # what one (LR, seed) run of a sweep trains


def trainer_spec(protocol, specs: list[str], family_of: Callable[[str], str]) -> str | None:
    """The task whose train pairs train every retrieval task of `specs` (`retrieval.train_on`), or None: none set, or
    no retrieval task to train. `family_of` gives a spec's family (a loaded task's, or without loading it)."""
    from encoderlab.tasks import trains_on_its_own

    spec = protocol.retrieval.train_on
    return spec if spec and any(family_of(s) == "retrieval" and not trains_on_its_own(s) for s in specs) else None


def check_trainer_spec(spec: str) -> None:
    """Refuse a `retrieval.train_on` that names no task, saying that the protocol named it (a user who never
    wrote it would not know where it came from)."""
    from encoderlab.tasks import task_identity

    try:
        task_identity(spec)
    except EncoderlabError as e:
        raise EncoderlabError(f"the protocol's retrieval.train_on ({spec!r}) trains every retrieval task of a sweep "
                              f"that has no train qrels of its own: {e}; set retrieval.train_on to a retrieval task "
                              "with train pairs (a task file of yours is fine), or to null if each has its own"
                              ) from None


def check_trainer(task: EvalTask, spec: str) -> None:
    if task.family != "retrieval" or not task.has_train:
        raise EncoderlabError(f"retrieval.train_on: {spec!r} must be a retrieval task with train pairs")


def training_units(tasks: list[EvalTask], trainer: RetrievalTask | None) -> list:
    """What the sweep trains: every task on its own, or with a trainer the retrieval tasks as one `TrainedOnce`, but
    for a user's own task with train qrels, which trains on them (`own_train_split`), unless it is the trainer."""
    if trainer is None:
        return list(tasks)
    retrieval = trained_by(tasks, trainer)
    others = [t for t in tasks if t not in retrieval]
    return others + ([TrainedOnce(trainer, retrieval)] if retrieval else [])


def trained_by(tasks: list[EvalTask], trainer: EvalTask) -> list[EvalTask]:
    """The tasks of `tasks` that the trainer's one run trains: the trainer and every retrieval task without train
    qrels of its own (`own_train_split`)."""
    return [t for t in tasks if t.family == "retrieval" and (t is trainer or not t.own_train_split)]


def job_groups(specs: list[str], protocol) -> list[tuple[str, list[str]]]:
    """A study's evaluation jobs of one checkpoint, as (name, task specs): one a task, or with `retrieval.train_on`
    one for every retrieval task, which share one trained model per LR and seed (separate jobs would each train it
    again). Also the number of trainings per LR and seed that the plan counts."""
    from encoderlab.tasks import task_family, trains_on_its_own

    if not protocol.retrieval.train_on:
        return [(t, [t]) for t in specs]
    train_on = protocol.retrieval.train_on
    retrieval = [t for t in specs if task_family(t) == "retrieval" and (t == train_on or not trains_on_its_own(t))]
    return [(t, [t]) for t in specs if t not in retrieval] + ([("retrieval", retrieval)] if retrieval else [])
