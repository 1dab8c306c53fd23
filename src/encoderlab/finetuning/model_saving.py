"""Saving fine-tuned models (`finetune --save`, `sweep --save-models`): which runs a sweep saves, and the training
of a run again to save it.

The folders themselves are written above this layer (hub/finetuned.py, a `ModelSaver`); the sweep hands a saver each
saved run's trained backbone and head with the records it scored. Models are kept from the sequential engine only:
the batched engine holds K runs stacked in one computation, whose weights equal the sequential engine's only up to
float rounding, so a model saved from it would not be the one its record's score was measured on if it were ever
trained again. `all` therefore trains every run sequentially and saves it as it ends; `chosen` lets the sweep run
on any engine and then trains the kept runs (the LR the protocol's `lr_choice` picks, each seed) again,
sequentially, saving each with the scores that model itself reached.
"""
from __future__ import annotations

from typing import Protocol as Interface

from torch import nn

from encoderlab.core.errors import EncoderlabError, option, option_name
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import finetune
from encoderlab.model.config import ModelConfig
from encoderlab.tasks import task_family, task_identity

MODES = ("none", "chosen", "all")


class ModelSaver(Interface):
    """What the sweep asks of whatever saves its models (hub/finetuned.py `SavedModels`)."""
    mode: str  # "chosen" or "all"

    def check(self, family: str, protocol: Protocol, model_cfg: ModelConfig, name: str) -> None:
        """Refuse, before any work, a task whose fine-tuned model no stock class computes."""

    def saved(self, name: str, identity: dict) -> bool:
        """Whether the run of `identity` (weights, protocol key, training data, LR, seed) is saved for `name`."""

    def check_replaces(self, name: str, identity: dict) -> None:
        """Refuse, before any training, a run whose folder holds another run's model."""

    def save(self, unit, backbone: nn.Module, head: nn.Module, records: dict[str, dict], identity: dict) -> None:
        """Save a trained run: `records` are the records it scored, one per task (a TrainedOnce scores several)."""


def check_saver(keep: ModelSaver | None, engine: str, workers: int | str) -> None:
    """`--save-models all` trains every run sequentially in this process (module docstring)."""
    if keep is None or keep.mode != "all":
        return
    if engine == "batched":
        raise EncoderlabError(f"{option('engine', 'batched')} cannot save each run (models are saved from the "
                              f"sequential engine): drop {option_name('engine')}, or save only the chosen runs "
                              f"({option('save-models', 'chosen')})")
    if workers != "auto" and workers != 1:
        raise EncoderlabError(f"{option('workers', workers)} cannot save each run (models are saved from runs trained "
                              f"in this process): use {option('workers', 1)}, or save only the chosen runs "
                              f"({option('save-models', 'chosen')})")


def chosen_runs(members: list[str], tasks: dict) -> list[tuple[float, int]]:
    """The (lr, seed) runs a summary keeps for any of `members` (a run that trained several tasks once is kept
    when any of them chose it), in order."""
    runs = {(lr, int(seed)) for name in members for seed, lr in (tasks.get(name, {}).get("lr_by_seed") or {}).items()}
    return sorted(runs, key=lambda r: (r[1], r[0]))


def check_tasks(keep: ModelSaver | None, specs: list[str], prepared: dict, protocol: Protocol,
                model_cfg: ModelConfig) -> None:
    """Each task's refusal, if its model cannot be saved (`ModelSaver.check`), before any task is prepared.
    `model_cfg`: encoderlab's backbone's, or a transformers encoder's (`TransformersConfig`)."""
    for spec in specs if keep is not None else []:
        name = prepared[spec].name if spec in prepared else task_identity(spec)[0]
        family = prepared[spec].family if spec in prepared else task_family(spec)
        keep.check(family, protocol.for_task(name), model_cfg, name)


def save_run(sweep, unit, backbone: nn.Module, head: nn.Module, body: dict) -> None:
    """Hand a trained run of `sweep` (finetuning/sweep.py) to its keeper with the records it scored."""
    body = {**body, "engine": "sequential"}
    bodies = unit.bodies_by_task(body)
    recs = {t.name: sweep.record(t, unit.training_task, bodies[t.name]) for t in unit.scored_tasks}
    sweep.keep.save(unit, backbone, head, recs, sweep.identity(unit, body["lr"], body["seed"]))


def save_chosen(sweep, tasks: dict) -> None:
    """Train again, sequentially, and save the runs the summary's `tasks` keep (`--save-models chosen`) that are
    not saved yet; each is saved with the scores that model reached (module docstring)."""
    for unit in sweep.units:
        for lr, seed in chosen_runs([t.name for t in unit.scored_tasks], tasks):
            if sweep.keep.saved(unit.name, sweep.identity(unit, lr, seed)):
                continue
            sweep.log(f"{unit.name}: training the kept run lr={lr:g} seed={seed} again to save it")
            body = finetune(unit, sweep.model_cfg, sweep.weights, lr=lr, seed=seed, device=sweep.device,
                            protocol=sweep.protocol.for_task(unit.name),
                            on_trained=lambda bb, hd, b, u=unit: save_run(sweep, u, bb, hd, b))
            if body["status"] != "ok":
                raise EncoderlabError(f"{unit.name} lr={lr:g} seed={seed}: trained again to be saved, the run "
                                      f"failed ({body['reason']}), unlike its record: nothing saved")
