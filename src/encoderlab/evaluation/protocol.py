"""The evaluation protocol as data (DESIGN.md convention 10): printed in every report, stored in every record."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EvalOptim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, ge=0)


class Protocol(BaseModel):
    """Up to `max_steps` or `epochs` over the training set, whichever comes first; `lrs` x `seeds` runs per task;
    the LR is chosen on `selection_split` by the mean score over seeds."""

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    max_steps: int = Field(1000, gt=0)
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(32, gt=0)
    eval_batch_size: int = Field(128, gt=0)
    lrs: list[float] = Field(default_factory=lambda: [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    warmup_fraction: float = Field(0.1, ge=0, lt=1)
    decay: Literal["linear", "constant"] = "linear"
    optim: EvalOptim = EvalOptim()
    max_length: int = Field(512, gt=8)
    max_length_by_family: dict[str, int] = Field(default_factory=dict)
    selection_split: Literal["validation"] = "validation"
    dtype: Literal["bf16", "fp32"] = "bf16"
    max_train_examples: int | None = Field(None, gt=0, description="subsample train (CPU demos); seeded")
    max_eval_examples: int | None = Field(None, gt=0, description="subsample validation/test (CPU demos)")
    max_corpus_documents: int | None = Field(None, gt=0, description="retrieval: judged documents plus random "
                                             "others up to this many (CPU demos; scores rise as the corpus shrinks)")
    curve_every: int = Field(10, gt=0, description="training loss recorded every N steps")

    def length_for(self, family: str) -> int:
        return self.max_length_by_family.get(family, self.max_length)
