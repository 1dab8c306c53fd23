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

FORMAT = 1
TRAINING = ("schedule", "total_steps", "lr_factor", "data_fingerprint", "config")
WSD_DECAY_STEPS_DUMPED = 2000  # the decay_steps older dumps wrote for every schedule kind


def upgrade_state(state: dict, where: str | Path) -> dict:
    """A checkpoint's state (read from `where`) in the current format; refused when its format is newer."""
    out = {**{key: None for key in TRAINING}, **formats.upgrade(state, where, [_from_unversioned])}
    if isinstance(out["config"], dict):
        out["config"] = run_config(out["config"])
    return out


def _from_unversioned(state: dict) -> dict:
    return {**state, "manifest": state.get("manifest") or None}  # some wrote false


def run_config(config: dict) -> dict:
    """A run's dumped pretraining config (config.yaml, a state's `config`) as the current code reads it."""
    schedule = config.get("lr_schedule")
    if isinstance(schedule, dict) and schedule.get("kind") in ("cosine", "constant") \
            and schedule.get("decay_steps") == WSD_DECAY_STEPS_DUMPED:
        return {**config, "lr_schedule": {k: v for k, v in schedule.items() if k != "decay_steps"}}
    return config
