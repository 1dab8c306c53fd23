"""A checkpoint's `state.json` of any format, in the current one: what `runs/checkpoint.py` reads every state through.

Format 1: `format_version: 1` and what every writer writes: `step`, `manifest` (the checksums file's name), `reason`,
and for a training checkpoint `phase`, `objective`, `data` and `TRAINING` (`schedule`, `total_steps`, `lr_factor`,
`data_fingerprint`, `config`: the run's definition), which read as None in a weights-only checkpoint (an import, a
random initialisation). Format 0 (no `format_version`) is what was written before; some of it before one of these
fields existed, and each reads as None, saying "not recorded":
- `manifest`: written before checksums existed; the checkpoint is accepted as it is, unverified;
- `config`: before checkpoints recorded their config; a run that lost its config.yaml resumes only when told
  (pretraining/resume.py);
- `lr_factor`, `data_fingerprint`: before they were recorded; nothing to compare a resumed run's with.

The checkpoint's `model_config.json` needs no step: it lists the model's fields, a decoder variant only when it is on
(model/config.py `VARIANTS`), so one written before the variants existed reads as a model with them off.

A run's config as it was dumped before `lr_schedule.decay_steps` could be unset (in config.yaml and in state.json)
holds the unused default for the schedules without a decay: `run_config` drops it, for either file.
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.core import formats
from encoderlab.core.errors import EncoderlabError

FORMAT = 1
TRAINING = ("schedule", "total_steps", "lr_factor", "data_fingerprint", "config")
WSD_DECAY_STEPS_DUMPED = 2000  # the decay_steps older dumps wrote for every schedule kind


def upgrade_state(state: dict, where: str | Path) -> dict:
    """A checkpoint's state (read from `where`) in the current format; refused when its format is newer."""
    out = {**{key: None for key in TRAINING}, **formats.upgrade(state, where, [_from_unversioned])}
    if isinstance(out["config"], dict):
        out["config"] = run_config(out["config"])
    return out


def check_position(state: dict, where: str | Path) -> None:
    """Refuse a step or data position no writer writes: the loader resumes at `samples_seen`, so one edited off
    `step` x global batch (checksums redone) would train other windows than the run's, or fail mid-read."""
    def count(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    step, data = state.get("step"), state.get("data")
    if not count(step):
        raise EncoderlabError(f"checkpoint file {where} is damaged: its step {step!r} is not a count of steps")
    if data is None:
        return  # weights only (an import, a random initialisation): no data position
    seen, batch = (data.get(k) if isinstance(data, dict) else None for k in ("samples_seen", "global_batch_size"))
    if not (count(seen) and count(batch) and batch > 0 and seen == step * batch):
        raise EncoderlabError(f"checkpoint file {where} is damaged: its data position (samples_seen {seen!r}) is not "
                              f"its step {step} x its global batch {batch!r}, as every writer saves it")


def _from_unversioned(state: dict) -> dict:
    return {**state, "manifest": state.get("manifest") or None}  # some wrote false


def run_config(config: dict) -> dict:
    """A run's dumped pretraining config (config.yaml, a state's `config`) as the current code reads it."""
    schedule = config.get("lr_schedule")
    if isinstance(schedule, dict) and schedule.get("kind") in ("cosine", "constant") \
            and schedule.get("decay_steps") == WSD_DECAY_STEPS_DUMPED:
        return {**config, "lr_schedule": {k: v for k, v in schedule.items() if k != "decay_steps"}}
    return config
