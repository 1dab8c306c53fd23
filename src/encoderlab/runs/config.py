"""Settings that every kind of run shares, pretraining and fine-tuning alike: seeds, AdamW, W&B."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# A seed every generator takes: torch's are 64 bits, NumPy's non-negative (a larger one ended in a traceback).
Seed = Annotated[int, Field(ge=0, le=2**64 - 1)]
# A learning rate: infinity passed `gt=0` and diverged at the first step, after the run had started.
LearningRate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# torch's AdamW refuses a beta outside [0, 1) only when the optimizer is built: after the run has started.
Beta = Annotated[float, Field(ge=0, lt=1)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AdamWSection(Section):
    """AdamW's settings, the same for pretraining and for fine-tuning (the protocol's `optim`)."""

    betas: tuple[Beta, Beta] = (0.9, 0.95)
    eps: float = Field(1e-5, gt=0, allow_inf_nan=False)
    weight_decay: float = Field(0.1, ge=0, allow_inf_nan=False)
    grad_clip: float = Field(1.0, ge=0, allow_inf_nan=False, description="max global grad norm; 0 disables clipping")


class WandbSection(Section):
    """Weights & Biases logging (the `wandb` extra), beside metrics.jsonl and TensorBoard; off unless given."""
    project: str = Field(..., min_length=1)
    name: str | None = Field(None, description="the W&B run's name; default: the run's name (a sweep: its checkpoint)")
    mode: Literal["online", "offline"] | None = Field(
        None, description="offline: kept in the run folder's wandb/ for `wandb sync`, nothing goes over the network; "
        "default: W&B's own (WANDB_MODE, else online)")
