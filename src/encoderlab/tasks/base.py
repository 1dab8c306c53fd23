"""What every evaluation task family implements, so one fine-tuning loop and one sweep serve all four.

A task is prepared once per tokenizer (tokenised splits cached on disk), then any number of runs use it: each run
builds a fresh head, draws its training batches from `epoch_batches(batch_size, seed)` (epochs of `train_batches`:
seeded orders, length-bucketed so padding stays small), computes `loss(backbone, head, batch)`, and is scored with
`evaluate(backbone, head, split, batch_size)`. All fine-tuning uses bidirectional attention
(`backbone(input_ids, causal=False, attention_mask=...)`), whatever the pretraining objective.
"""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from encoderlab.core.seeds import derive_seed
from encoderlab.data.offline.taskfiles import SPLITS
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.model.transformer import Transformer


class EvalTask(ABC):
    name: str  # e.g. "rt-polarity"
    family: str  # a registered family's name (tasks/registry.py)
    metric: str  # the protocol's metric, reported as "score" by evaluate(): accuracy, entity_f1, f1, ndcg@10, ...
    # The field's standard metric, reported as "standard" by evaluate() and trivial_baseline() whatever the protocol
    # (accuracy, seqeval entity_f1, SQuAD f1, standard ndcg@10), so one run answers both "does it match the paper"
    # and "how does it compare with the rest of the field"; equal to "score" where the protocol uses it.
    standard_metric: str = ""
    # of the definition and data files, given to the task's constructor (load_task hands it to the family's loader):
    # records are kept by it
    fingerprint: str = ""
    truncated: dict[str, int]  # inputs cut at max_length by prepare(), per split (retrieval: corpus, queries)
    truncation_unit: str  # what `truncated` counts: examples, words, questions, texts
    inputs: str = "bos_eos"  # the protocol's `inputs` (apply_protocol): bos_eos or eos
    batch_order: str = "length_buckets"  # the protocol's `batch_order` (apply_protocol)
    train_unit: str = "training examples"  # what num_train_examples() counts, as the sweep's log says it
    # {split: {name: scores}} of the family's baselines (tasks/baselines.py), set once prepared (tasks/build.py)
    baseline_scores: dict[str, dict[str, dict[str, float]]] | None = None
    # A user's own retrieval task (a task file) with train qrels: it trains on them whatever the protocol's
    # `retrieval.train_on` says (given to its constructor by its loader; finetuning/shared_training.py reads it)
    own_train_split: bool = False
    # What its loader found legal but worth a word (a user's train class that no evaluation file has): the sweep's
    # log says each line once the task is prepared (finetuning/sweep.py prepare_tasks)
    notes: tuple[str, ...] = ()
    # Family extras, declared here so that no reader looks for them by name: tokens' tag scheme (iob1, iob2, bioes,
    # plain); how a retrieval task's validation and test were drawn where its source has one evaluation split
    scheme: str | None = None
    data_split: dict | None = None
    labels: list[str] | None = None  # the class or tag names, for families that have them (a saved model names them)
    text_fields: tuple[str, ...] | None = None  # classification's: one field (a text) or two (a pair)
    default_tag: int | None = None  # tokens': the tag predicted for words cut off
    # QA's: whether unanswerable questions are allowed; the protocol's qa.format and, for "tagging", its state (a
    # qa_tagging.QATagging, which imports this module)
    allow_unanswerable: bool | None = None
    format: str | None = None
    tagging: Any = None
    # Set by `seal` once tasks/build.py has built the task: its order-dependent steps (`subsample`, `apply_protocol`,
    # `limit`, `prepare`) are then refused, since one taken again would leave its examples, ids and baselines apart
    _built: bool = False

    # A task is the unit a sweep trains of itself: trained on its own train split, scoring itself
    # (finetuning/shared_training.py has the other kind of unit).
    @property
    def training_task(self) -> EvalTask:
        return self

    @property
    def scored_tasks(self) -> list[EvalTask]:
        return [self]

    def bodies_by_task(self, body: dict) -> dict[str, dict]:
        """A run's record body per task it scores."""
        return {self.name: body}

    def seal(self) -> None:
        """Mark the task built (tasks/build.py, once its baselines are computed): from here `subsample`,
        `apply_protocol`, `limit` and `prepare` are refused."""
        self._built = True

    def _refuse_once_built(self, step: str) -> None:
        if self._built:
            raise RuntimeError(f"task {self.name!r} is built (tasks/build.py): {step} would change it after its "
                               "examples, ids and baselines were made; build it again instead")

    def apply_protocol(self, protocol) -> None:
        """Take the protocol's choices that shape this task's inputs, batches, head, labels or metric (before
        `prepare`; finetuning/protocol.py). Families with choices of their own extend it."""
        self._refuse_once_built("apply_protocol")
        self.inputs, self.batch_order = protocol.inputs, protocol.batch_order

    def limit(self, protocol, seed: int) -> None:
        """Apply the protocol's limits of this family's own (after `apply_protocol`, before `prepare`): retrieval's
        corpus; none here."""
        self._refuse_once_built("limit")

    def answers_lost(self) -> dict[str, int] | None:
        """Per split, the answers that inputs cut at max_length lost (QA tagging); None where none can be lost."""
        return None

    def batch_indices(self, lengths: list[int], batch_size: int, seed: int) -> list[list[int]]:
        """One epoch's batches of example indices in the order of `seed`, as the protocol's `batch_order` says."""
        if self.batch_order == "random":
            return random_order(len(lengths), batch_size, seed)
        return bucketed_order(lengths, batch_size, seed)

    def framed(self, ids: list[int], bos: int, eos: int) -> list[int]:
        """One text's token ids with the special tokens of the protocol's `inputs`: `<bos> ids <eos>` or `ids <eos>`."""
        return [*([bos] if self.inputs == "bos_eos" else []), *ids, eos]

    @abstractmethod
    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        """Tokenise every split (cached under cache_dir keyed by tokenizer + max_length + data)."""

    @abstractmethod
    def num_train_examples(self) -> int:
        """Training examples (or windows, for QA) after preparation."""

    @abstractmethod
    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        """A fresh head initialised from `generator` (the run's seed decides it)."""

    @abstractmethod
    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        """One epoch of training batches in a seeded order (CPU tensors)."""

    def epoch_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        """Training batches without end, epoch after epoch, each epoch in its own order: epoch 0 in the order of
        `seed`, epoch e > 0 in that of `derive_seed("epoch-order", seed, e)`: no two (seed, epoch) share an order."""
        for epoch in itertools.count():
            yield from self.train_batches(batch_size, seed if epoch == 0 else derive_seed("epoch-order", seed, epoch))

    @abstractmethod
    def loss(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        """Mean training loss of a batch (batch tensors already on the backbone's device)."""

    @abstractmethod
    def evaluate(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        """Metrics on a split in percent (0-100): "score" (the protocol's metric), "standard" (`standard_metric`)
        and any others by name."""

    @abstractmethod
    def trivial_baseline(self, split: str) -> dict[str, float]:
        """The score of the trivial predictor (majority class, all-O tags, first span, random ranking); the
        family's other baselines (lexical models, always abstaining) are in tasks/baselines.py."""

    def baseline_settings(self) -> dict:
        """The settings that decide the baselines' scores beside the examples (tasks/baselines.py keys its cache by
        them and names the trivial baseline from them); a family without one of them has None."""
        return {"family": self.family, "metric": self.metric, "scheme": self.scheme, "format": self.format,
                "labels": self.labels, "text_fields": self.text_fields, "default_tag": self.default_tag,
                "allow_unanswerable": self.allow_unanswerable}

    def longest_train_sequence(self) -> int | None:
        """The longest tokenised training example, where the task keeps one sequence per example (list-based
        tasks, once prepared); None where it does not (finetuning/batched.py then sizes runs by the protocol's
        length)."""
        return None

    def baseline_data(self) -> list:
        """The examples that decide the baselines' scores, beside the settings (tasks/baselines.py keys its cache by
        them): the splits here."""
        return [self.splits]  # type: ignore[attr-defined]

    def scored_examples(self, split: str) -> int:
        """How many examples (texts, sentences, questions; queries for retrieval) a split's score averages over."""
        return len(self.splits[split])  # type: ignore[attr-defined]

    def truncation_totals(self) -> dict[str, int]:
        """What each count of `truncated` is out of, in `truncation_unit`: a split's examples here."""
        return {part: len(self.splits[part]) for part in self.truncated}  # type: ignore[attr-defined]

    def subsample(self, split: str, n: int, seed: int) -> None:
        """Keep a seeded random `n` examples of a split (CPU protocols); call before `prepare`.

        Works for tasks that keep their examples in `self.splits` (a dict of lists); others override it.
        """
        self._refuse_once_built("subsample")
        examples = self.splits[split]  # type: ignore[attr-defined]
        if len(examples) > n:
            keep = sorted(torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:n].tolist())
            self.splits[split] = [examples[i] for i in keep]  # type: ignore[attr-defined]
            self._subsampled(split, keep)

    def _subsampled(self, split: str, keep: list[int]) -> None:  # noqa: B027 - an optional hook, not abstract
        """Hook for tasks that derive per-example state at construction (called by `subsample`)."""

class ListTask(EvalTask, ABC):
    """Shared plumbing of tasks whose examples are lists per split (`self.splits`) tokenised into `self.ids`."""

    splits: dict[str, list[dict]]
    ids: dict[str, list[list[int]]]

    def num_train_examples(self) -> int:
        return len(self.splits["train"])

    def longest_train_sequence(self) -> int | None:
        return max((len(x) for x in self.ids["train"]), default=None) if self.ids and self.ids.get("train") else None

    def _prepared(self, split: str) -> list[list[int]]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if not self.ids:
            raise RuntimeError(f"task {self.name!r}: call prepare(tokenizer, max_length) first")
        return self.ids[split]

CONSTANT = "constant"  # evaluate()'s key, present only when every prediction of the split was the same


def constant(predictions: list, describe) -> dict[str, str]:
    """{CONSTANT: what was predicted} when a split's predictions (two or more) are all the same, else {}: the mark of
    a model that learned nothing (one class, all "O", always "no answer", one ranking for every query), which its
    record and every table name rather than let its score pass for a learned one. `describe(prediction)` says it."""
    first = predictions[0] if predictions else None
    if len(predictions) < 2 or any(p != first for p in predictions):
        return {}
    return {CONSTANT: describe(first)}


def record_scores(scores: dict[str, dict]) -> dict:
    """A run's {split: evaluate() result} as its record keeps it: "scores" (numbers only) and, beside them,
    "constant_predictions" ({split: what}, for the splits where every prediction was the same)."""
    return {"scores": {s: {k: v for k, v in m.items() if k != CONSTANT} for s, m in scores.items()},
            "constant_predictions": {s: m[CONSTANT] for s, m in scores.items() if CONSTANT in m}}


def answer(text: str) -> str:
    """A QA prediction as `constant` names it."""
    return f"the answer {text!r}" if text else "no answer"


def linear_head(hidden_size: int, outputs: int, generator: torch.Generator) -> nn.Linear:
    """A linear head with normal(0, 0.02) weights drawn from the run's generator and zero bias."""
    head = nn.Linear(hidden_size, outputs)
    with torch.no_grad():
        nn.init.normal_(head.weight, mean=0.0, std=0.02, generator=generator)
        nn.init.zeros_(head.bias)
    return head

def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean over non-padding tokens: (B, T, C), (B, T) -> (B, C)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)

def bucketed_order(lengths: list[int], batch_size: int, seed: int, bucket_factor: int = 50) -> list[list[int]]:
    """Batches of example indices with similar lengths, in a seeded random order.

    Examples are shuffled, cut into chunks of `bucket_factor` batches, sorted by length inside each chunk and
    batched; the batches are shuffled again. Padding stays small while each epoch's order still depends on the seed.
    """
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(lengths), generator=g).tolist()
    chunk = batch_size * bucket_factor
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    perm = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in perm]

def random_order(n: int, batch_size: int, seed: int) -> list[list[int]]:
    """Batches of a seeded random permutation of `n` examples (the last one may be smaller), as a sampler that
    knows nothing of lengths draws them (the HF Trainer's)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]

def pad(sequences: list[list[int]], pad_id: int, value_for_mask: bool = True) -> tuple[Tensor, Tensor]:
    """Right-pad to the longest: (input_ids (B, T) int64, attention_mask (B, T) int64)."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask
