"""Divergence stops a run: a non-finite training loss or gradient norm, non-finite weights about to be saved, or
(`train.loss_spike`, off by default) a logged loss that jumps above a multiple of the lowest one logged before. A run
that runs out of memory ends in one line too (`out_of_memory`).

The loop hands every step's loss and gradient norm to a `Watch`, which keeps them on the device (reading them each
step would make the host wait for the accelerator) and looks at them where the loop waits anyway: at each log line
and before each checkpoint. So a checkpoint is only written after every step before it was found finite, and its
weights too: a diverged run stops with its last finite checkpoint as LATEST, and since nothing is saved, nothing is
pruned. The error names the first bad step, however many steps later it was seen.

Every rank decides alike: the loss is already summed over ranks and the gradient norm is global, and the verdict is
summed over ranks besides (one small all-reduce per log line or checkpoint), so all ranks stop at the same step.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from encoderlab.core.errors import Failed, option
from encoderlab.pretraining import distributed
from encoderlab.runs import checkpoint
from encoderlab.runs.logging import read_metrics


class Diverged(Failed):
    """Pretraining diverged: not a refused input (exit code 2) but a failed run (exit code 1)."""


class Watch:
    def __init__(self, run_dir: Path, world: distributed.World, loss_spike: float | None, resumed_at: int):
        self.run_dir, self.world, self.loss_spike = run_dir, world, loss_spike
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (step, loss, grad norm) not yet seen
        # The spike rule's reference, per objective: the lowest loss logged so far, the resumed run's included, so
        # that a resumed run stops where the uninterrupted one would.
        self.lowest: dict[str, float] = {}
        if loss_spike is not None:
            for record in read_metrics(run_dir / "metrics.jsonl"):
                if record["step"] <= resumed_at:
                    self._lower(record)

    def add(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        self.pending.append((step, stats["loss"], stats["grad_norm"]))

    def check_steps(self) -> None:
        """Raise `Diverged` if a step since the last check had a non-finite loss or gradient norm."""
        if not self.pending:
            return
        values = torch.stack([torch.stack([loss.float(), norm.float()]) for _, loss, norm in self.pending])
        bad = (~torch.isfinite(values).all(dim=1)).float()
        bad = torch.stack(distributed.sum_over_ranks(self.world, *bad.unbind())).cpu()
        pending, self.pending = self.pending, []
        if bad.any():
            step, loss, norm = pending[int(bad.nonzero()[0])]
            self._stop(step, f"the training loss is {float(loss):g} and the gradient norm {float(norm):g}")

    def check_record(self, record: dict) -> None:
        """The steps of a log line, then the spike rule on its losses (the means over the steps since the last)."""
        self.check_steps()
        if self.loss_spike is not None:
            for key, loss in _losses(record).items():
                if key in self.lowest and loss > self.loss_spike * self.lowest[key]:
                    self._stop(record["step"], f"the {key} logged, {loss:.4g}, is over train.loss_spike="
                                               f"{self.loss_spike:g} x the lowest before ({self.lowest[key]:.4g})")
            self._lower(record)

    def check_weights(self, model: torch.nn.Module, step: int) -> None:
        """Before a checkpoint: the steps since the last check, then the weights themselves (a finite step can
        still overflow a weight)."""
        self.check_steps()
        bad = sum((~torch.isfinite(p.detach()).all()).float() for p in distributed.local_parameters(model))
        if float(distributed.sum_over_ranks(self.world, torch.as_tensor(bad, dtype=torch.float32))[0]):
            self._stop(step, "a weight is not finite")

    def _lower(self, record: dict) -> None:
        for key, loss in _losses(record).items():
            self.lowest[key] = min(loss, self.lowest.get(key, math.inf))

    def _stop(self, step: int, what: str) -> None:
        last = checkpoint.latest(self.run_dir) if self.run_dir.exists() else None
        kept = f"the last checkpoint, {last}, was saved before it and is kept" if last else "no checkpoint was saved"
        raise Diverged(f"pretraining diverged at step {step} in {self.run_dir}: {what}; the run stopped, saving "
                       f"nothing after it: {kept} (lower optim.lr, or raise lr_schedule.warmup_steps, and start a new "
                       "run or branch from it)")


def _losses(record: dict) -> dict[str, float]:
    """A log line's finite training losses by key (`mlm40/loss`), validation losses left out."""
    return {k: v for k, v in record.items() if k.endswith("/loss") and not k.startswith("val/") and math.isfinite(v)}


def out_of_memory(exc: BaseException, run_dir: Path, step: int, micro: int, local_batch: int, seq_len: int,
                  checkpointing: bool) -> Failed:
    """A run that ran out of memory, in one line (exit code 1): what did not fit, and the settings that make it fit
    without changing the run (both free on --resume): a micro-batch at most half as large that divides this rank's
    batch (gradient accumulation: the same numbers), activation checkpointing."""
    found = checkpoint.latest(run_dir)
    kept = (f"its last checkpoint, {found.name}, is kept: pass {option('resume')} with the new setting" if found else
            "it saved no checkpoint, so the next start begins it again")
    asked = re.search(r"tried to allocate ([\d.]+) ?([KMG]iB)?", str(exc), re.IGNORECASE)
    cause = (f"it asked for {asked[1]} {asked[2]}" if asked and asked[2] else
             f"it asked for {int(asked[1]) / 2**30:.2f} GiB" if asked else type(exc).__name__)
    smaller = max((d for d in range(1, micro // 2 + 1) if local_batch % d == 0), default=None)
    fixes = [f"train.micro_batch={smaller} (this rank's batch of {local_batch} stays, as gradient accumulation: the "
             "same run, the same numbers)"] if smaller else []
    fixes += [] if checkpointing else ["train.activation_checkpointing=true"]
    advice = (f"set {' or '.join(fixes)}" if fixes else
              "nothing of this run fits: a smaller model or shorter windows (`data prepare --seq-len`) is another run")
    sequences = "sequence" if micro == 1 else "sequences"
    return Failed(f"pretraining ran out of memory at step {step} in {run_dir} ({cause}): a micro-batch of {micro} "
                  f"{sequences} x {seq_len} tokens did not fit; {advice}; {kept}")
