"""K fine-tuning runs of one (checkpoint, task) grid trained together, as one computation per step.

Each run is trained with finetuning/training.py's pieces, as `training.finetune` trains it: its seed's data order
(`task.epoch_batches`), its seeded head, its LR times the protocol's schedule, its own AdamW (`build_adamw` over its
rows of the stacks), its own gradient clipping (the same global norm over its own parameters, vectorised here), its
loss curve and its records (a NaN/inf loss records the run as failed and drops it from the group; the others go on).
What is shared is the work: the parameters of the K runs are stacked along a leading K dimension and one
`torch.func.vmap(grad_and_value(task.loss))` over `functional_call` computes the K losses and gradients, so any
task that implements `EvalTask.loss` is batched without task-specific code. The result is one record body per run,
in `finetune`'s format, so the sweep, aggregation and reports cannot tell the engines apart.

Padding. Runs that share a seed share their batches. Runs with different seeds see different batches at the same
step; a call pads them to a common length (padding is masked out of attention, pooling and losses, so a run's loss
does not change, up to float rounding). Padding is computed work, so each step is split into calls by a small
dynamic programme over the distinct batches sorted by length: a call costs its padded tokens plus a fixed overhead
(`CALL_OVERHEAD_TOKENS`, large on GPU where launches dominate, small on CPU where matrix products do). Batches of
different sizes (an epoch's short last batch) are never padded into one call: a padded row would change the mean.

Memory. The K runs are split into groups that fit a budget (a fraction of free accelerator memory, or of available
RAM): per run the weights, gradients and two AdamW moments (`protocol.weights`), plus activations for a batch of
the longest training example (the protocol's length where the task does not tell).

Which engine a sweep uses, and when this one is faster: finetuning/engines.py.

Not batched: evaluation (each run's weights are loaded into one backbone and scored with `task.evaluate`, as
`finetune` does), which is a small part of a run. A record's `seconds` is its share of its group's training time
plus its own evaluation.

Equality with `finetune`: the same arithmetic in another order (padding, batched products, SDPA's math form on CPU),
so float rounding differs: ~1e-6 relative in fp32 losses (tests/unit/test_batched.py), and under bf16 autocast as
much as switching the sequential engine's attention kernel does (1e-4..1e-2 on the test tasks).
"""
from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning.heartbeat import HEARTBEAT_S, minutes
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import (
    LossCurve,
    diverged_record,
    lr_factor,
    planned_steps,
    scored_record,
    seeded_head,
    to_device,
    weight_dtype,
)
from encoderlab.model import attention
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.runs.optim import autocast, build_adamw, clip_stacked, set_lr
from encoderlab.tasks import registry
from encoderlab.tasks.base import EvalTask

PAD_VALUES = {"labels": -100}  # every other batch tensor pads with 0 (token id, mask "absent", span "not allowed")
# A call's fixed cost in tokens of work (module docstring). CPU: ~10 ms of dispatch per forward and backward
# against ~0.2 ms per token of the tiny preset, measured here; CUDA: an estimate for launch-bound small models.
CALL_OVERHEAD_TOKENS = {"cuda": 4096, "cpu": 64}
MEMORY_FRACTION = {"cuda": 0.8, "cpu": 0.5}


class _Run(nn.Module):
    """Backbone and head of one run, so that `functional_call` can swap in any run's weights."""

    def __init__(self, task: EvalTask, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.task, self.backbone, self.head = task, backbone, head

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.task.loss(self.backbone, self.head, batch)


# ------------------------------------------------------------------------------------------------ the group


class Group:
    """The training state of K runs of one task: stacked parameters (K, ...), one AdamW per run, data iterators.

    Row i of every stack is run i (`runs`, sorted) for good: a failed run's row is no longer selected."""

    def __init__(self, task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor],
                 runs: list[tuple[float, int]], protocol: Protocol, device: torch.device) -> None:
        if not runs:
            raise ValueError("a group needs at least one run")
        self.task, self.protocol, self.device = task, protocol, device
        self.runs = sorted(runs, key=lambda r: (r[1], r[0]))  # same seed adjacent: their calls are slices, not copies
        self.total = planned_steps(task, protocol)
        self.step_no = 0
        # the training steps' and the scoring's
        self.attention = attention.for_finetuning(device, protocol.length_for(task.family))
        heads = [seeded_head(task, model_cfg.hidden_size, seed) for _, seed in self.runs]
        with torch.device("meta"):  # structure only: functional_call swaps in every run's weights
            template = _Run(task, Transformer(model_cfg, self.attention), copy.deepcopy(heads[0]).to("meta"))
        self.module = template
        self.buffers = {f"head.{n}": b.to(device) for n, b in heads[0].named_buffers()}  # constants, not stacked
        self.names = [n for n, _ in template.named_parameters()]
        expected = {n[len("backbone."):] for n in self.names if n.startswith("backbone.")}
        if set(weights) != expected:
            missing, unexpected = sorted(expected - set(weights))[:5], sorted(set(weights) - expected)[:5]
            raise EncoderlabError(f"backbone weights do not fit the model config: missing {missing}, "
                                  f"unexpected {unexpected}")
        K, dtype = len(self.runs), weight_dtype(protocol)
        self.params: dict[str, Tensor] = {}
        for name in self.names:
            if name.startswith("backbone."):
                w = weights[name[len("backbone."):]].to(device, dtype)
                self.params[name] = w.unsqueeze(0).expand(K, *w.shape).clone()
            else:
                key = name[len("head."):]
                self.params[name] = torch.stack([dict(h.named_parameters())[key].detach() for h in heads]).to(device,
                                                                                                             dtype)
        # Each run's own AdamW (finetune's optimizer) over its rows of the stacks, which it updates in place.
        self.rows = [[self.params[n][i] for n in self.names] for i in range(K)]
        self.optimizers: list[torch.optim.AdamW | None] = [build_adamw(r, protocol.optim, lr=0.0) for r in self.rows]
        self.curves = [LossCurve(protocol, self.total) for _ in self.runs]
        self.finished: dict[int, dict] = {}  # run index -> failed record body
        self.alive = list(range(K))  # the runs still training
        self.iterators = {seed: task.epoch_batches(protocol.batch_size, seed) for _, seed in self.runs}
        self.started = time.perf_counter()
        self.call_overhead = CALL_OVERHEAD_TOKENS.get(device.type, 64)
        self._grad = vmap(grad_and_value(self._loss), in_dims=(0, None, 0))

    def _loss(self, params: dict[str, Tensor], buffers: dict[str, Tensor], batch: dict[str, Tensor]) -> Tensor:
        return functional_call(self.module, (params, buffers), (batch,))


    @property
    def done(self) -> bool:
        return not self.alive or self.step_no >= self.total

    def step(self) -> list[int]:
        """One optimizer step of every live run; returns the indices of runs that failed at it."""
        batches = {s: next(self.iterators[s]) for s in dict.fromkeys(self.runs[i][1] for i in self.alive)}
        blocks = [([i for i in self.alive if self.runs[i][1] == seed], batch) for seed, batch in batches.items()]
        outputs = []  # (run indices, their gradients (len(idx), ...)) per call
        losses = torch.empty(len(self.runs), device=self.device)
        for idx, batch in plan_calls(blocks, self.call_overhead):
            grads, value = self._call(self._select(idx), batch)
            losses[idx] = value.float()
            outputs.append((idx, grads))
        losses = losses.detach().cpu()
        finite = dict(zip(self.alive, torch.isfinite(losses[self.alive]).tolist()))
        failed = [i for i in self.alive if not finite[i]]
        for i in failed:  # finetune's check, before the update
            self.finished[i] = diverged_record(float(losses[i]), *self.runs[i], self.step_no, self.total,
                                               self.curves[i], (time.perf_counter() - self.started) / len(self.runs))
        factor = lr_factor(self.step_no, self.total, self.protocol)
        for idx, grads in outputs:
            clip_stacked(grads, self.protocol.optim.grad_clip)  # each run's own, as finetune's
            for j, i in enumerate(idx):
                if finite[i]:
                    self._update(i, [grads[n][j] for n in self.names], self.runs[i][0] * factor)
        for i in failed:
            self.optimizers[i] = None  # its moments go; its row stays, never selected again
        self.alive = [i for i in self.alive if finite[i]]
        if self.alive:
            self.step_no += 1
            for i in self.alive:
                self.curves[i].add(self.step_no, losses[i])
        return failed

    def _select(self, idx: list[int]) -> dict[str, Tensor]:
        """The stacked weights of some runs: views when they are consecutive, else a copy (forward only)."""
        if idx == list(range(idx[0], idx[-1] + 1)):
            if len(idx) == len(self.runs):
                return self.params
            return {n: p[idx[0] : idx[-1] + 1] for n, p in self.params.items()}
        where = torch.tensor(idx, device=self.device)
        return {n: p.index_select(0, where) for n, p in self.params.items()}

    def _call(self, params: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[dict[str, Tensor], Tensor]:
        with autocast(self.protocol.dtype, self.device), attention.for_batched(self.device):
            return self._grad(params, self.buffers, to_device(batch, self.device))

    def _update(self, i: int, grads: list[Tensor], lr: float) -> None:
        """Run i's AdamW step on its rows. One fused pass per run, because a step takes one LR; K of them cost
        little more than one."""
        for row, grad in zip(self.rows[i], grads):
            row.grad = grad
        optimizer = self.optimizers[i]
        set_lr(optimizer, lr)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def results(self, model_cfg: ModelConfig, evaluate_splits=("validation", "test")) -> list[dict]:
        """Evaluate every live run (its weights loaded into one backbone) and return all record bodies, in the
        order the runs were given."""
        train_share = (time.perf_counter() - self.started) / len(self.runs)
        dtype = weight_dtype(self.protocol)
        backbone = Transformer(model_cfg, self.attention).to(self.device, dtype)
        bodies = dict(self.finished)
        for i in self.alive:
            started = time.perf_counter() - train_share
            lr, seed = self.runs[i]
            head = seeded_head(self.task, model_cfg.hidden_size, seed).to(self.device, dtype)
            with torch.no_grad():
                for name, module in (("backbone.", backbone), ("head.", head)):
                    for n, p in module.named_parameters():
                        p.copy_(self.params[name + n][i])
            bodies[i] = scored_record(self.task, backbone, head, lr=lr, seed=seed, steps=self.step_no,
                                      curve=self.curves[i], protocol=self.protocol, device=self.device,
                                      splits=evaluate_splits, started=started)
        return [bodies[i] for i in range(len(self.runs))]


# ------------------------------------------------------------------------------------------------ padding


def pad_to(t: Tensor, shape: tuple[int, ...], value: int) -> Tensor:
    if tuple(t.shape) == shape:
        return t
    out = torch.full(shape, value, dtype=t.dtype)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


def _tokens(shapes: dict[str, tuple[int, ...]]) -> int:
    """Padded work of one example: its token-id tensors' sizes (all tensors' if none is named *ids)."""
    ids = [s for k, s in shapes.items() if k.endswith("ids")] or list(shapes.values())
    return sum(math.prod(s[1:]) for s in ids)


def plan_calls(blocks: list[tuple[list[int], dict[str, Tensor]]],
               overhead: float) -> list[tuple[list[int], dict[str, Tensor]]]:
    """Split a step's batches into calls: (stack indices, stacked padded batch) each.

    blocks: (the runs that train on this batch, the batch). Blocks sorted by size then length are cut into
    consecutive calls minimising sum(runs x batch rows x padded tokens per row) + overhead per call; blocks of
    different batch sizes never share a call.
    """
    keys = sorted(blocks[0][1])
    for _, b in blocks:
        if sorted(b) != keys:
            raise ValueError(f"batches of one task differ in keys: {keys} vs {sorted(b)}")
        odd = [k for k, v in b.items() if not torch.is_tensor(v)]
        if odd:
            raise EncoderlabError(f"the batched engine stacks batches of tensors only; {odd} are not tensors "
                                  "(use the sequential engine for this task)")
    shapes = [{k: tuple(b[k].shape) for k in keys} for _, b in blocks]
    order = sorted(range(len(blocks)), key=lambda j: (shapes[j][keys[0]][0], _tokens(shapes[j])))

    def merged(js: list[int]) -> dict[str, tuple[int, ...]] | None:
        out = {}
        for k in keys:
            dims = [shapes[j][k] for j in js]
            if len({len(d) for d in dims}) > 1 or len({d[0] for d in dims}) > 1:
                return None  # another batch size (or rank): padding rows would change the loss
            out[k] = tuple(max(d[i] for d in dims) for i in range(len(dims[0])))
        return out

    n = len(order)
    best, cut = [0.0] + [math.inf] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            js = order[i:j]
            shape = merged(js)
            if shape is None:
                continue
            rows = sum(len(blocks[x][0]) for x in js) * shape[keys[0]][0]
            cost = best[i] + rows * _tokens(shape) + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    spans, j = [], n
    while j > 0:
        spans.append(order[cut[j] : j])
        j = cut[j]
    calls = []
    for js in reversed(spans):
        js = sorted(js, key=lambda x: blocks[x][0][0])  # stack order, so a call is a slice when it can be
        shape = merged(js)
        assert shape is not None
        idx = [k for x in js for k in blocks[x][0]]
        batch = {k: torch.cat([pad_to(blocks[x][1][k], shape[k], PAD_VALUES.get(k, 0)).unsqueeze(0)
                               .expand(len(blocks[x][0]), *shape[k]) for x in js]) for k in keys}
        calls.append((idx, batch))
    return calls


# ------------------------------------------------------------------------------------------------ groups and runs


def run_bytes(model_cfg: ModelConfig, protocol: Protocol, family: str, device: torch.device,
              longest: int | None = None) -> int:
    """A generous estimate of one run's memory in a group: weights, gradients and AdamW moments (fp32, plus bf16
    copies under autocast; or all bf16), and the activations of a batch of the longest training sequence
    (`longest`, else the protocol's length) kept for the backward pass."""
    n = model_cfg.num_parameters() - (0 if model_cfg.tie_word_embeddings else model_cfg.vocab_size
                                      * model_cfg.hidden_size)  # the backbone: no LM head
    state = n * (8 if protocol.weights == "bf16" else 16 + (2 if protocol.dtype == "bf16" else 0))
    T = protocol.length_for(family) if longest is None else min(longest, protocol.length_for(family))
    tokens = protocol.batch_size * T * registry.family(family).sequences
    act = 2 if protocol.dtype == "bf16" else 4
    per_token_layer = (16 * model_cfg.hidden_size + 4 * model_cfg.intermediate_size) * act
    if device.type == "cpu":  # the math attention keeps scores and probabilities: (H, T) per token, fp32
        per_token_layer += 2 * model_cfg.num_attention_heads * T * 4
    return state + tokens * model_cfg.num_hidden_layers * per_token_layer


def group_size(task: EvalTask, model_cfg: ModelConfig, protocol: Protocol, device: torch.device,
               budget: int | None = None) -> int:
    """How many runs of this task fit in memory together (at least one)."""
    need = run_bytes(model_cfg, protocol, task.family, device, task.longest_train_sequence())
    return max(1, (budget or memory_budget(device)) // need)


def memory_budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * MEMORY_FRACTION["cuda"])
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not every platform names available pages
        available = 8 * 2**30
    return int(available * MEMORY_FRACTION["cpu"])


def split_groups(runs: list[tuple[float, int]], size: int) -> list[list[tuple[float, int]]]:
    """Groups of at most `size` runs, as even as possible, each seed's runs together where they fit."""
    runs = sorted(runs, key=lambda r: (r[1], r[0]))
    count = math.ceil(len(runs) / max(1, size))
    bounds = [round(i * len(runs) / count) for i in range(count + 1)]
    return [runs[a:b] for a, b in zip(bounds, bounds[1:])]


def finetune_grid(task: EvalTask, model_cfg: ModelConfig, weights: dict[str, Tensor], runs: list[tuple[float, int]],
                  *, protocol: Protocol, device: torch.device, evaluate_splits=("validation", "test"),
                  max_group: int | None = None, budget: int | None = None,
                  skip: Callable[[float, int], bool] | None = None,
                  log: Callable[[str], None] = lambda m: None) -> Iterator[dict]:
    """Train and score the (lr, seed) runs of one task, a memory-sized group at a time; yields finetune-format
    record bodies as each group finishes. `skip(lr, seed)` is asked before each group (another sweep may have
    recorded a run meanwhile). Progress (step, ETA) goes to `log` every tenth of a group's steps, and at least every
    `HEARTBEAT_S` seconds (a tenth of a long group's steps is minutes)."""
    size = group_size(task, model_cfg, protocol, device, budget)
    size = min(size, max_group or size)
    groups = split_groups(runs, size)
    for g, members in enumerate(groups):
        members = [r for r in members if skip is None or not skip(*r)]
        if not members:
            continue
        log(f"{task.name}: {len(members)} runs trained together (group {g + 1} of {len(groups)})")
        group = Group(task, model_cfg, weights, members, protocol, device)
        every, said = max(1, group.total // 10), time.perf_counter()
        while not group.done:
            group.step()
            now = time.perf_counter()
            if (group.step_no % every == 0 or now - said >= HEARTBEAT_S) and not group.done:
                said, spent = now, now - group.started
                log(f"{task.name}: step {group.step_no}/{group.total} of {len(group.alive)} runs, "
                    f"eta ~{minutes(spent / group.step_no * (group.total - group.step_no))} before evaluation")
        yield from group.results(model_cfg, evaluate_splits)
