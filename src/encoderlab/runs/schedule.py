"""Learning-rate schedules as pure functions of the step, continuous across objective phases.

`factor` is the one schedule of both loops: pretraining's `LRSchedule` (a config section) and a fine-tuning
protocol's warmup and decay (`finetuning/training.py` `lr_factor`) both call it. WSD (warmup, stable, decay) is the
paper's: linear warmup, constant peak, then a decay to 0 over the last `decay_steps`; the step where decay starts is
where the *stable* checkpoint is written, from which branches (other budgets, other objective splits) continue with
their own decay.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from encoderlab.core.errors import option, option_name

Decay = Literal["linear", "1-sqrt", "cosine", "constant"]
WSD_DECAY_STEPS = 2000  # WSD's decay length when a config gives none


def factor(step: int, total: int, *, warmup: int, decay: Decay, decay_start: int, floor: float = 0.0) -> float:
    """Multiplier of the peak LR for the update made at `step` (0-based) of `total`: linear warmup over `warmup`
    steps, the peak until `decay_start`, then `decay` to `floor`, which it reaches just after the last step."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant" or step < decay_start:
        return 1.0
    progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
    if decay == "cosine":
        remaining = 0.5 * (1 + math.cos(math.pi * progress))
    else:
        remaining = 1 - progress if decay == "linear" else 1 - math.sqrt(progress)
    return floor + (1 - floor) * remaining


class LRSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["wsd", "cosine", "constant"] = "wsd"
    warmup_steps: int = Field(2000, ge=0)
    decay_steps: int | None = Field(None, ge=0, description=f"WSD only: length of the final decay "
                                                            f"(default {WSD_DECAY_STEPS})")
    decay_shape: Literal["linear", "1-sqrt"] = "linear"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="LR at the end, as a fraction of the peak")

    @model_validator(mode="after")
    def _check(self) -> LRSchedule:
        if self.kind != "wsd" and self.decay_steps is not None:
            raise ValueError(  # the file's decay_steps survives a `--set lr_schedule={kind: ...}`, which merges
                f"kind {self.kind!r} has no decay, yet this lr_schedule holds decay_steps: {self.decay_steps}, which "
                f"applies to kind 'wsd' only (a mapping in {option_name('set')} updates the file's section key by "
                "key: replace the whole section with "
                f"{option('set', f'lr_schedule!={{kind: {self.kind}, ...}}', quote=True)}, or drop decay_steps)")
        if self.kind == "wsd" and self.decay_steps is None:
            self.decay_steps = WSD_DECAY_STEPS
        return self

    def decay_start(self, total_steps: int) -> int | None:
        """First step of the WSD decay (None for other kinds)."""
        if self.kind != "wsd":
            return None
        assert self.decay_steps is not None  # set by validation
        return max(self.warmup_steps, total_steps - self.decay_steps)

    def factor(self, step: int, total_steps: int) -> float:
        """Multiplier of the peak LR for the update made at `step` (0-based)."""
        decay: Decay = self.decay_shape if self.kind == "wsd" else self.kind
        start = self.decay_start(total_steps)
        return factor(step, total_steps, warmup=self.warmup_steps, decay=decay,
                      decay_start=self.warmup_steps if start is None else start, floor=self.min_lr_ratio)
