"""Retrieval trained once, scored on many sets (the authors' protocol, `retrieval.train_on`): one run per LR and seed
fine-tunes on the train pairs of one retrieval task and is scored on every retrieval task of the sweep.

`TrainedOnce` is what the engines train (a task to them: its batches, head and loss are the training task's); its
`evaluate` scores every member, and `member_bodies` turns the one run's record body into one body per member.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from torch import Tensor, nn

from encoderlab.evaluation.tasks.base import set_apart
from encoderlab.evaluation.tasks.retrieval import RetrievalTask


class TrainedOnce:
    family = "retrieval"

    def __init__(self, train: RetrievalTask, members: list[RetrievalTask]) -> None:
        self.train, self.members = train, members
        self.metric, self.standard_metric = train.metric, train.standard_metric  # one protocol: the members' too
        self.name = train.name  # its protocol overrides (steps, batch, length) are the training task's

    def num_train_examples(self) -> int:
        return self.train.num_train_examples()

    def make_head(self, hidden_size: int, generator) -> nn.Module:
        return self.train.make_head(hidden_size, generator)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        return self.train.train_batches(batch_size, seed)

    def epoch_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        return self.train.epoch_batches(batch_size, seed)

    def loss(self, backbone: nn.Module, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return self.train.loss(backbone, head, batch)

    def evaluate(self, backbone: nn.Module, head: nn.Module, split: str, batch_size: int) -> dict:
        """Every member's metrics under "by_task"; "score" is their sum, only so that a non-finite one is seen."""
        by_task = {m.name: m.evaluate(backbone, head, split, batch_size) for m in self.members}
        return {"score": math.fsum(m["score"] for m in by_task.values()), "by_task": by_task}

    def member_bodies(self, body: dict) -> dict[str, dict]:
        """The run's record body as one body per member: its own scores (a failed run fails for all)."""
        if body["status"] != "ok":
            return {m.name: body for m in self.members}
        return {m.name: {**body, **set_apart({s: v["by_task"][m.name] for s, v in body["scores"].items()})}
                for m in self.members}


def training_units(tasks: list, train_on: RetrievalTask | None) -> list:
    """What the sweep trains: every task on its own, or with `train_on` all retrieval tasks as one `TrainedOnce`."""
    if train_on is None:
        return list(tasks)
    retrieval = [t for t in tasks if t.family == "retrieval"]
    others = [t for t in tasks if t.family != "retrieval"]
    return others + ([TrainedOnce(train_on, retrieval)] if retrieval else [])
