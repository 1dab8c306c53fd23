"""Learning-rate schedules as pure functions of the step, continuous across objective phases.

WSD (warmup, stable, decay) is the paper's: linear warmup, constant peak, then a decay to 0 over the last
`decay_steps`; the step where decay starts is where the *stable* checkpoint is written, from which branches (other
budgets, other objective splits) continue with their own decay.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LRSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["wsd", "cosine", "constant"] = "wsd"
    warmup_steps: int = Field(2000, ge=0)
    decay_steps: int = Field(2000, ge=0, description="WSD only: length of the final decay")
    decay_shape: Literal["linear", "1-sqrt"] = "linear"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="LR at the end, as a fraction of the peak")

    @model_validator(mode="after")
    def _check(self) -> LRSchedule:
        if self.kind != "wsd" and self.decay_steps not in (0, 2000):
            raise ValueError("decay_steps applies to kind 'wsd' only")
        return self

    def decay_start(self, total_steps: int) -> int | None:
        """First step of the WSD decay (None for other kinds)."""
        return max(self.warmup_steps, total_steps - self.decay_steps) if self.kind == "wsd" else None

    def factor(self, step: int, total_steps: int) -> float:
        """Multiplier of the peak LR for the update made at `step` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        floor = self.min_lr_ratio
        if self.kind == "constant":
            return 1.0
        if self.kind == "cosine":
            span = max(1, total_steps - self.warmup_steps)
            progress = min(1.0, (step - self.warmup_steps) / span)
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        start = self.decay_start(total_steps)
        assert start is not None
        if step < start:
            return 1.0
        progress = (step - start) / max(1, total_steps - start)  # reaches `floor` just after the last step
        remaining = 1 - progress if self.decay_shape == "linear" else 1 - math.sqrt(progress)
        return floor + (1 - floor) * remaining
