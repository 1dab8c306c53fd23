"""What a sweep refuses before any work: the task list, the records folder's owner, the inputs' lengths against the
model's positions, and the execution settings. Each check is one line naming what and where, before the model loads
or a task is prepared (`sweep.run_sweep` calls them in that order)."""
from __future__ import annotations

from pathlib import Path

import torch

from encoderlab.core.errors import EncoderlabError, option, option_name
from encoderlab.finetuning import records
from encoderlab.finetuning.engines import ENGINES
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.shared_training import check_trainer_spec, trainer_spec
from encoderlab.model.config import ModelConfig
from encoderlab.runs.encoders import encoder_identity, usable_positions
from encoderlab.tasks import task_family, task_identity


def check_specs(specs: list[str], prepared: dict, protocol: Protocol) -> str | None:
    """Refuse, before the checkpoint loads, a task given twice (its records' lock would be taken twice), a bad task
    file or missing data file, and a `retrieval.train_on` that names no task; returns that trainer's spec, if any."""
    if twice := [s for i, s in enumerate(specs) if s in specs[:i]]:
        raise EncoderlabError(f"task {twice[0]!r} is given twice; name each task once")
    for spec in specs:
        if spec not in prepared:
            task_identity(spec)
    shared = trainer_spec(protocol, specs, lambda s: prepared[s].family if s in prepared else task_family(s))
    if shared and shared not in prepared:
        check_trainer_spec(shared)
    return shared


def check_owner(out: Path, path: Path) -> None:
    """Records are filed under the model's last two path parts (records.checkpoint_tag): another model with the
    same two holds that folder, and each sweep would replace the other's records. Refused before any work."""
    tag = records.checkpoint_tag(path)
    if (owner := records.other_owner(out, tag, path, lambda p: encoder_identity(p)[0])) is not None:
        raise EncoderlabError(f"{out / tag} holds the records of {owner}, another model filed under the same name "
                              "(a folder's last two path parts; a run's name and step): pass another "
                              f"{option_name('out')} for {path.resolve()}")


def check_lengths(protocol: Protocol, specs: list[str], prepared: dict, model_cfg, path: Path) -> None:
    """The model's positions bound its inputs, a longer `max_length` is refused before any work: a transformers
    encoder's learned ones, and encoderlab's backbone's `max_position_embeddings` (an imported model's context,
    which pretraining holds its windows to as well)."""
    limit = usable_positions(model_cfg)
    whose = (f"this {model_cfg.model_type} model takes at most" if not isinstance(model_cfg, ModelConfig) else
             "this model's positions (model_config.json max_position_embeddings) stop at")
    for spec in specs:
        task = prepared.get(spec)
        family, name = (task.family, task.name) if task else (task_family(spec), task_identity(spec)[0])
        length = protocol.for_task(name).length_for(family)
        if length > limit:
            raise EncoderlabError(f"{path}: the protocol gives {name} inputs of {length} tokens; {whose} "
                                  f"{limit} (set max_length or "
                                  f"max_length_by_family.{family} to {limit} or less)")


def check_execution(engine: str, workers: int | str, device: torch.device) -> None:
    if engine not in ENGINES:
        raise EncoderlabError(f"{option('engine', engine, quote=True)} is not one of {', '.join(ENGINES)}")
    if workers != "auto" and (not isinstance(workers, int) or workers < 1):
        raise EncoderlabError(f"{option('workers', workers, quote=True)}: give 'auto' or a whole number, 1 or more")
    if workers != "auto" and workers > 1 and device.type != "cpu":
        raise EncoderlabError(f"workers > 1 spreads runs over CPU processes; on {device.type} the batched "
                              f"engine trains a task's runs together instead ({option('engine', 'auto')} or "
                              f"batched, {option('workers', 1)})")
    if workers != "auto" and workers > 1 and engine == "batched":
        raise EncoderlabError(f"{option('engine', 'batched')} trains a task's runs together in one process: use it "
                              f"with {option('workers', 1)}, or {option('engine', 'sequential')}/auto with several "
                              "workers")
