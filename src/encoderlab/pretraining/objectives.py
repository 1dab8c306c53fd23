"""Pretraining objectives: MLM masking, CLM shift, their loss on the sparse LM head, and schedules of them.

MLM and CLM differ only here (inputs, labels) and in the `causal` flag of the forward call; the model is the same
(docs/architecture.md, convention 1). Each objective prepares its own batch (`objective.prepare`) into the same four
tensors:

    input_ids  (B, T)  what the model reads (MLM: a corrupted copy; CLM: the batch itself)
    labels     (B, T)  the token to predict, -100 where nothing is predicted (Hugging Face convention)
    positions  (N,)    flat indices into B*T of the predicted positions, increasing
    targets    (N,)    labels.flatten()[positions]

so the LM head runs only at `positions` (MLM: the masking rate of the tokens; CLM: almost all of them).

MLM follows the paper (docs/paper.md#pretraining): every non-special token is selected independently with
probability `mask_rate` and replaced by the mask token; the loss is taken only on selected tokens. BERT's 80/10/10
corruption is available as `strategy="80-10-10"` for follow-ups. CLM predicts the next token of the same document:
in a packed window the `<eos>` of one document never predicts the `<bos>` of the next one (convention 7).

Randomness comes only from the `torch.Generator` passed in, on the device of the batch, so a seed fixes the masks
on any device. No Python loop runs over tokens (only over the handful of special ids), and the one host-device
sync is the `nonzero` that turns the selection into `positions` (the number of masked tokens is data-dependent).
Distributed training is not this module's business (convention 9).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.seeds import derive_seed

IGNORE_INDEX = -100
MaskStrategy = Literal["mask", "80-10-10"]
_STRATEGIES = ("mask", "80-10-10")


class ObjectiveError(EncoderlabError, ValueError):
    """An objective's settings are out of range (a mask rate outside (0, 1), an unknown strategy, ...)."""


@dataclass(frozen=True)
class Vocab:
    """What the objectives need to know of the tokenizer. `special_ids` are never masked (the mask id is added)."""

    size: int
    mask_id: int | None
    special_ids: tuple[int, ...]


# ---- inputs and labels -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LMInputs:
    input_ids: Tensor  # (B, T) what the model reads
    labels: Tensor  # (B, T) target token, IGNORE_INDEX where none
    positions: Tensor  # (N,) int64 flat indices into B*T of the predicted tokens, increasing
    targets: Tensor  # (N,) int64, labels.flatten()[positions]

    @classmethod
    def of(cls, input_ids: Tensor, labels: Tensor) -> LMInputs:
        # nonzero syncs with the host (its length is data-dependent); it is the only sync of this module and returns
        # indices in increasing order. The model's index form of `output_positions` then needs no further sync.
        positions = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (N,)
        return cls(input_ids, labels, positions, labels.reshape(-1).index_select(0, positions))


def _special_mask(input_ids: Tensor, special_ids: list[int]) -> Tensor:
    """(B, T) True at special tokens; a loop over the few special ids, no host-to-device copy."""
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    for s in special_ids:
        special |= input_ids == s
    return special


def _nth_non_special(k: Tensor, special_sorted: list[int]) -> Tensor:
    """Map k in [0, V - m) to the k-th non-special id, for specials sorted ascending: skip each special passed."""
    ids = k
    for s in special_sorted:
        ids = ids + (ids >= s).to(ids.dtype)
    return ids


# ---- the objectives ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MLM:
    """Masked language modelling, bidirectional attention. `mask_rate` is the paper's 20/30/40/50%."""

    mask_rate: float = 0.4
    strategy: MaskStrategy = "mask"

    def __post_init__(self) -> None:
        rate = self.mask_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate < 1.0:
            raise ObjectiveError(
                f"MLM mask_rate={rate!r} is not allowed: it must be a number strictly between 0 and 1 "
                "(the paper uses 0.2, 0.3, 0.4 or 0.5)"
            )
        if self.strategy not in _STRATEGIES:
            raise ObjectiveError(
                f"MLM strategy={self.strategy!r} is not allowed: use one of {', '.join(map(repr, _STRATEGIES))}"
            )

    @property
    def name(self) -> str:
        """`mlm40` as in the released run names (`610m-clm-10k-mlm40-42k`); `mlm15_801010` for BERT corruption."""
        percent = self.mask_rate * 100
        rate = f"{round(percent)}" if abs(percent - round(percent)) < 1e-9 else f"{percent:g}"
        return f"mlm{rate}" + ("" if self.strategy == "mask" else "_801010")

    @property
    def causal(self) -> bool:
        return False

    def prepare(self, input_ids: Tensor, doc_ids: Tensor, vocab: Vocab, generator: torch.Generator | None) -> LMInputs:
        """Select each non-special token with probability `mask_rate` and corrupt it; labels only at selected tokens.

        strategy "mask": every selected token becomes the mask id (the paper). "80-10-10": 80% the mask id, 10% a
        token drawn uniformly from the non-special ids of the vocabulary, 10% left unchanged (BERT). `generator`
        must live on the device of `input_ids`; None uses the global RNG. `doc_ids` plays no part in masking.
        """
        mask_id, vocab_size = vocab.mask_id, vocab.size
        if mask_id is None:
            raise ObjectiveError("MLM needs a mask token, and this vocabulary has none")
        if not 0 <= mask_id < vocab_size:
            raise ObjectiveError(f"mask_id={mask_id} is outside the vocabulary (vocab_size={vocab_size})")
        specials = sorted({int(s) for s in vocab.special_ids} | {int(mask_id)})
        in_vocab = [s for s in specials if 0 <= s < vocab_size]
        if len(in_vocab) >= vocab_size:
            raise ObjectiveError(f"all {vocab_size} ids of the vocabulary are special: nothing can be masked")
        device = input_ids.device

        draw = torch.rand(input_ids.shape, generator=generator, device=device)  # (B, T)
        selected = (draw < self.mask_rate) & ~_special_mask(input_ids, specials)  # (B, T)
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))

        if self.strategy == "mask":
            corrupted = input_ids.masked_fill(selected, mask_id)
        else:
            bucket = torch.rand(input_ids.shape, generator=generator, device=device)  # (B, T): 80 / 10 / 10
            k = torch.randint(0, vocab_size - len(in_vocab), input_ids.shape, generator=generator, device=device)
            random_ids = _nth_non_special(k, in_vocab).to(input_ids.dtype)  # (B, T), never special
            corrupted = torch.where(selected & (bucket < 0.9), random_ids, input_ids)
            corrupted = corrupted.masked_fill(selected & (bucket < 0.8), mask_id)
        return LMInputs.of(corrupted, labels)


@dataclass(frozen=True)
class CLM:
    """Causal (next-token) language modelling, causal attention."""

    @property
    def name(self) -> str:
        return "clm"

    @property
    def causal(self) -> bool:
        return True

    def prepare(self, input_ids: Tensor, doc_ids: Tensor, vocab: Vocab, generator: torch.Generator | None) -> LMInputs:
        """Next-token labels that never cross a document boundary; the last position of a window predicts nothing.

        labels[:, t] = input_ids[:, t+1] where doc_ids[:, t+1] == doc_ids[:, t], else -100. A document cut by the
        window end simply loses its last target. Packed data has no padding; nothing here is random.
        """
        if doc_ids.shape != input_ids.shape:
            raise ValueError(f"doc_ids has shape {tuple(doc_ids.shape)}, input_ids {tuple(input_ids.shape)}")
        same_doc = doc_ids[:, 1:] == doc_ids[:, :-1]  # (B, T-1)
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        labels[:, :-1] = torch.where(same_doc, input_ids[:, 1:], labels[:, :-1])
        return LMInputs.of(input_ids, labels)


Objective = MLM | CLM


# ---- loss --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LossSums:
    """Sums over the predicted tokens of a batch, so that micro-batches and ranks add up exactly."""

    loss: Tensor  # () fp32 sum of the per-token cross-entropies, with grad
    correct: Tensor  # () count of predicted tokens whose target has the largest logit, detached
    tokens: Tensor  # () int64 count of predicted tokens


def loss_sums(model: nn.Module, input_ids: Tensor, doc_ids: Tensor, objective: Objective, vocab: Vocab,
              generator: torch.Generator | None) -> LossSums:
    """Cross-entropy summed over the predicted tokens of `objective`, without host sync beyond `prepare`.

    The model runs with the objective's attention (`causal`), document masks (`doc_ids`) and the LM head only at
    the predicted positions; the cross-entropy is in fp32 whatever the logits' dtype. A mean is `loss / tokens`
    (0 tokens: nothing to predict, and a sum of 0).
    """
    inputs = objective.prepare(input_ids, doc_ids, vocab, generator)
    loss, correct = model(
        inputs.input_ids, causal=objective.causal, doc_ids=doc_ids, output_positions=inputs.positions,
        targets=inputs.targets,
    )  # the LM head and its cross-entropy fused (model/lm_loss.py): no (N, V) logits kept
    return LossSums(loss=loss, correct=correct.detach(), tokens=(inputs.labels != IGNORE_INDEX).sum())  # no sync


# ---- schedules of objectives -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    """Per-batch mixing: each step draws one objective with probability proportional to its weight.

    The draw depends only on (seed, step), so a resumed run draws the same objectives.
    """

    parts: tuple[tuple[Objective, float], ...]

    @property
    def name(self) -> str:
        return "mix(" + ",".join(f"{o.name}={w:g}" for o, w in self.parts) + ")"

    @property
    def members(self) -> list[Objective]:
        return [o for o, _ in self.parts]

    def pick(self, step: int, seed: int) -> Objective:
        weights = torch.tensor([w for _, w in self.parts], dtype=torch.float64)
        gen = torch.Generator().manual_seed(derive_seed("objective-mix", seed, step))
        return self.parts[int(torch.multinomial(weights, 1, generator=gen))][0]


@dataclass(frozen=True)
class Phase:
    """Steps [start, end) of a run trained with one objective (or a per-batch mix of several)."""

    index: int
    objective: Objective | Mix
    start: int
    end: int

    def objective_at(self, step: int, seed: int) -> Objective:
        return self.objective.pick(step, seed) if isinstance(self.objective, Mix) else self.objective

    @property
    def members(self) -> list[Objective]:
        return self.objective.members if isinstance(self.objective, Mix) else [self.objective]

    def describe(self) -> dict:
        return {"objective": self.objective.name, "start": self.start, "end": self.end, "steps": self.end - self.start}


@dataclass(frozen=True)
class Schedule:
    """'mlm40' or 'clm:25%,mlm40:75%' or 'clm:10000,mlm40:rest', parsed: what each phase trains and its length.

    Each part is OBJECTIVE[:LENGTH]; LENGTH is a percentage of the run ('25%'), a number of steps ('1000') or
    'rest' (what is left; also the meaning of a missing length on the last part). OBJECTIVE may be a per-batch mix,
    'mix(clm=1,mlm40=3)'. `text` is what the user wrote, and what configs and checkpoints store.
    """

    text: str
    parts: tuple[tuple[Objective | Mix, str | None], ...]  # length as written; None: the rest of the run

    @classmethod
    def parse(cls, text: str) -> Schedule:
        parts = [_name_and_length(p) for p in _split_top_level(text)]
        if not parts:
            raise ObjectiveError("empty objective schedule: give e.g. 'mlm40' or 'clm:25%,mlm40:75%'")
        for k, (_, length) in enumerate(parts):
            if length is None and k != len(parts) - 1:
                raise ObjectiveError(f"in {text!r}: only the last phase may omit its length or say 'rest'")
            if length is not None and not length.isdigit() and not (length.endswith("%") and _is_number(length[:-1])):
                raise ObjectiveError(f"in {text!r}: length {length!r} must be a percentage ('25%'), steps ('1000') "
                                     "or 'rest'")
        return cls(text, tuple((parse_phase_objective(name), length) for name, length in parts))

    def phases(self, total_steps: int) -> list[Phase]:
        """Consecutive phases covering the run's `total_steps` steps; the lengths must add up to it."""
        lengths = [None if n is None else round(float(n[:-1]) / 100 * total_steps) if n.endswith("%") else int(n)
                   for _, n in self.parts]
        if lengths[-1] is None:
            lengths[-1] = total_steps - sum(n for n in lengths if n is not None)
        if sum(lengths) != total_steps or any(n <= 0 for n in lengths):  # type: ignore[operator]
            raise ObjectiveError(f"phases {self.text!r} give {lengths} steps, which must be positive and add up to "
                                 f"the run's {total_steps} steps (train.steps)")
        phases, start = [], 0
        for k, ((objective, _), n) in enumerate(zip(self.parts, lengths)):
            phases.append(Phase(k, objective, start, start + n))  # type: ignore[operator]
            start += n  # type: ignore[operator]
        return phases


def parse_objective(text: str) -> Objective:
    """'clm', 'mlm' (40%, the paper's default), 'mlm30', 'mlm15_801010' (BERT-style corruption)."""
    name = text.strip().lower()
    if name == "clm":
        return CLM()
    if name.startswith("mlm"):
        rest, strategy = name[3:], "mask"
        if rest.endswith("_801010"):
            rest, strategy = rest[: -len("_801010")], "80-10-10"
        if rest == "" or _is_number(rest):
            return MLM(float(rest) / 100 if rest else 0.4, strategy)  # type: ignore[arg-type]
    raise ObjectiveError(f"unknown objective {text!r}: use 'clm', 'mlm' or 'mlmNN' (NN = mask percentage, e.g. "
                         "'mlm40'), optionally with '_801010' for BERT's 80/10/10 corruption")


def parse_mix(text: str) -> Mix:
    """'mix(clm=1,mlm40=3)' -> Mix; weights default to 1 ('mix(clm,mlm40)')."""
    inner = text.strip()[len("mix("):-1]
    parts = []
    for item in (i.strip() for i in inner.split(",") if i.strip()):
        name, sep, weight = item.partition("=")
        w = (float(weight) if _is_number(weight) else -1.0) if sep else 1.0
        if not w > 0:
            raise ObjectiveError(f"in {text!r}: weight of {name!r} must be a positive number, got {weight!r}")
        parts.append((parse_objective(name), w))
    if len(parts) < 2:
        raise ObjectiveError(f"{text!r} mixes fewer than two objectives: write e.g. 'mix(clm=1,mlm40=1)'")
    return Mix(tuple(parts))


def parse_phase_objective(name: str) -> Objective | Mix:
    """What one phase trains: an objective ('mlm40') or a per-batch mix ('mix(clm=1,mlm40=3)')."""
    return parse_mix(name) if name.lower().startswith("mix(") else parse_objective(name)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (mixes do not nest), so 'mix(clm,mlm40):50%,mlm40' has two parts."""
    return [p.strip() for p in re.split(r",(?![^(]*\))", text) if p.strip()]


def _name_and_length(part: str) -> tuple[str, str | None]:
    """'clm:25%' -> ('clm', '25%'); 'clm:rest' and 'mix(clm,mlm40)' -> (..., None): a colon inside the parentheses
    is not a length."""
    name, sep, length = part.rpartition(":")
    if not sep or ")" in length:
        return part.strip(), None
    length = length.strip().lower()
    return name.strip(), None if length == "rest" else length


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def phase_at(phases: list[Phase], step: int) -> Phase:
    for phase in phases:
        if phase.start <= step < phase.end:
            return phase
    raise ObjectiveError(f"step {step} is outside the schedule (0..{phases[-1].end - 1})")


__all__ = [
    "CLM",
    "IGNORE_INDEX",
    "LMInputs",
    "LossSums",
    "MLM",
    "Mix",
    "Objective",
    "ObjectiveError",
    "Phase",
    "Schedule",
    "Vocab",
    "loss_sums",
    "parse_mix",
    "parse_objective",
    "parse_phase_objective",
    "phase_at",
]


def skip_mask_draws(gen: torch.Generator, rows: int, seq_len: int) -> torch.Generator:
    """Advance `gen` past the MLM mask draws of `rows` windows: rank r, whose rows follow those of ranks < r in the
    global batch, then draws the masks a single process draws for its rows. Exact on CPU, whose generator draws in
    sequence, for the paper's masking (one number per token); CUDA's counter-based generator, and BERT's 80-10-10
    corruption (three draws per token), move on to fresh numbers instead: as random, not the same."""
    if rows:
        torch.rand((rows, seq_len), generator=gen, device=gen.device)
    return gen
