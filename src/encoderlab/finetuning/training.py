"""The fine-tuning step and run: a pretrained backbone, a fresh head, one LR and seed, bidirectional attention.

Every engine trains with these pieces: the sequential one (`finetune`, also in finetuning/parallel.py's workers)
and the batched one (finetuning/batched.py), which computes K runs' losses and gradients in one call but takes
its data order, head, LR schedule, clipping norm, AdamW, loss curve and records from here.
"""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from encoderlab.finetuning.protocol import Protocol
from encoderlab.model import attention
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformers_body import backbone
from encoderlab.runs import schedule
from encoderlab.runs.optim import autocast, build_adamw, clip, set_lr
from encoderlab.tasks.base import EvalTask, record_scores


def backbone_state(lm_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The `model.*` weights of a TransformerLM state dict, renamed for a bare Transformer (the LM head is dropped)."""
    return {k[len("model."):]: v for k, v in lm_state.items() if k.startswith("model.")}


def planned_steps(task: EvalTask, protocol: Protocol) -> int:
    """`max_steps` or `epochs` over the training set, whichever comes first."""
    per_epoch = math.ceil(task.num_train_examples() / protocol.batch_size)
    return max(1, min(protocol.max_steps, math.floor(per_epoch * protocol.epochs)))


# Scoring batches on CPU: elementwise ops over activations that fit in cache run 2-4x faster per element (SwiGLU's
# silu * up: 0.17 ms a row at 8 rows of 212 tokens, 0.61 at 128 rows), while the matrix products keep their speed.
# Measured, tiny preset, 1 thread: wiki-title scoring 14.9 s at 128, 10.5 s at 32; wiki-cloze 9.0 / 4.8 s; conll-ner
# 2.9 / 0.9 s, with the same scores. eval_batch_size is not part of the protocol's key for this reason.
CPU_SCORING_BATCH = 32


def scoring_batch_size(protocol: Protocol, device: torch.device) -> int:
    """The protocol's eval_batch_size, capped on CPU (CPU_SCORING_BATCH)."""
    return min(protocol.eval_batch_size, CPU_SCORING_BATCH) if device.type == "cpu" else protocol.eval_batch_size


def weight_dtype(protocol: Protocol) -> torch.dtype:
    """The dtype a run's weights (and so its gradients and AdamW moments) are held in: `protocol.weights`."""
    return torch.bfloat16 if protocol.weights == "bf16" else torch.float32


def lr_factor(step: int, total: int, protocol: Protocol) -> float:
    """The protocol's schedule at `step` of `total`: linear warmup, then linear decay to 0 (or constant)."""
    warmup = round(protocol.warmup_fraction * total)
    return schedule.factor(step, total, warmup=warmup, decay=protocol.decay, decay_start=warmup)


def seeded_head(task: EvalTask, hidden_size: int, seed: int) -> nn.Module:
    """The run's fresh head, drawn from its seed; the global RNG is reseeded too, for anything else that draws."""
    torch.manual_seed(seed)
    return task.make_head(hidden_size, torch.Generator().manual_seed(seed))


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


class LossCurve:
    """The training loss a record keeps: the mean over every `curve_every` steps, and over the last ones."""

    def __init__(self, protocol: Protocol, total: int) -> None:
        self.every, self.total = protocol.curve_every, total
        self.points: list[list[float]] = []
        self._window: list[Tensor] = []

    def add(self, step: int, loss: Tensor) -> None:
        """The loss of step number `step` (1-based)."""
        self._window.append(loss)
        if step % self.every == 0 or step == self.total:
            self.points.append([step, float(torch.stack(self._window).float().mean())])
            self._window = []


def failed_record(reason: str, lr: float, seed: int, steps: int, curve: LossCurve, seconds: float) -> dict:
    return {"status": "failed", "reason": reason, "lr": lr, "seed": seed, "steps": steps, "curve": curve.points,
            "seconds": round(seconds, 2)}


def diverged_record(loss: float, lr: float, seed: int, step: int, total: int, curve: LossCurve,
                    seconds: float) -> dict:
    """The record of a run whose loss at step index `step` is not finite (that step updated nothing)."""
    return failed_record(f"training loss became {loss} at step {step + 1} of {total}", lr, seed, step, curve, seconds)


def scored_record(task: EvalTask, backbone: nn.Module, head: nn.Module, *, lr: float, seed: int, steps: int,
                  curve: LossCurve, protocol: Protocol, device: torch.device, splits, started: float) -> dict:
    """Score a trained run on `splits` and return its record; `seconds` counts from `started` (perf_counter)."""
    backbone.eval(), head.eval()
    scores = {}
    with torch.no_grad(), autocast(protocol.dtype, device):
        for split in splits:
            scores[split] = task.evaluate(backbone, head, split, scoring_batch_size(protocol, device))
    seconds = time.perf_counter() - started
    bad = [s for s, m in scores.items() if not math.isfinite(m["score"])]
    if bad:
        return failed_record(f"{'/'.join(bad)} score is not finite", lr, seed, steps, curve, seconds)
    return {"status": "ok", "lr": lr, "seed": seed, "steps": steps, **record_scores(scores), "curve": curve.points,
            "seconds": round(seconds, 2)}


class FinetuneRun:
    """One run's backbone (the pretrained weights), seeded head and AdamW; `step` takes one training step."""

    def __init__(self, task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor], seed: int,
                 protocol: Protocol, device: torch.device) -> None:
        self.task, self.protocol, self.device = task, protocol, device
        self.backbone = backbone(model_cfg, attention.for_finetuning(device, protocol.length_for(task.family)))
        self.backbone.load_state_dict(weights)
        self.backbone.to(device, weight_dtype(protocol))
        self.head = seeded_head(task, model_cfg.hidden_size, seed).to(device, weight_dtype(protocol))
        self.params = [*self.backbone.parameters(), *self.head.parameters()]
        self.optimizer = build_adamw(self.params, protocol.optim, lr=0.0)  # `step` sets each step's LR

    def step(self, batch: dict, lr: float) -> tuple[Tensor, bool]:
        """Train on one batch at this LR: (its loss, whether it was finite). A non-finite loss changes nothing; the
        check is the step's one host sync."""
        with autocast(self.protocol.dtype, self.device):
            loss = self.task.loss(self.backbone, self.head, to_device(batch, self.device))
        if not torch.isfinite(loss):
            return loss.detach(), False
        loss.backward()
        clip(self.params, self.protocol.optim.grad_clip)
        set_lr(self.optimizer, lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), True


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs, back as it was after; the block's own cyclic
    garbage is freed as it ends, so a pause never holds it past its block (nested in a sweep's pause, past a run).

    Why: its full passes traverse every object the process tracks (the prepared tasks' token lists, the imported
    modules), and a run's allocations start them: 0.7-0.9 s of a conll-ner job's 3 runs (micro, small-study protocol,
    one core, 5-6% of it), each pass finding nothing to free. A run makes no cyclic garbage (none on each of the
    demo's four tasks, once a process has run one: the first run's imports leave about a thousand objects);
    tensors are freed by reference counting. Results are the same bits."""
    enabled = gc.isenabled()
    try:
        gc.disable()  # inside: a Ctrl-C just after it still restores the collector
        yield
    finally:
        if enabled:  # first: a second Ctrl-C during the collection below must not leave it off
            gc.enable()
        gc.collect(0)  # the youngest generation: what the block made and still holds, not the whole process


def finetune(task: EvalTask, model_cfg: ModelConfig, weights: dict[str, torch.Tensor], *, lr: float, seed: int,
             protocol: Protocol, device: torch.device, evaluate_splits=("validation", "test"),
             on_step: Callable[[int, int], None] | None = None,
             on_trained: Callable[[nn.Module, nn.Module, dict], None] | None = None) -> dict:
    """Train and score one run. Returns the record body (status "ok", or "failed" with the reason). `on_step(done,
    total)` after each step: the sweep's heartbeat (finetuning/heartbeat.py); `on_trained` gets the trained backbone
    and head with the body of a run that scored (finetuning/model_saving.py saves them)."""
    started = time.perf_counter()
    with collector_paused():
        run = FinetuneRun(task, model_cfg, weights, seed, protocol, device)
        total = planned_steps(task, protocol)
        curve = LossCurve(protocol, total)
        batches = task.epoch_batches(protocol.batch_size, seed)
        for step in range(total):
            loss, finite = run.step(next(batches), lr * lr_factor(step, total, protocol))
            if not finite:
                return diverged_record(float(loss), lr, seed, step, total, curve, time.perf_counter() - started)
            curve.add(step + 1, loss)
            if on_step is not None:
                on_step(step + 1, total)
        body = scored_record(task, run.backbone, run.head, lr=lr, seed=seed, steps=total, curve=curve,
                             protocol=protocol, device=device, splits=evaluate_splits, started=started)
    if on_trained is not None and body["status"] == "ok":
        on_trained(run.backbone, run.head, body)
    return body
