"""The evaluation protocol as data (docs/architecture.md, convention 10): printed in every report, stored in every
record."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from encoderlab.core.config import booleans_for_numbers, deep_merge
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS
from encoderlab.finetuning import migrate_protocol
from encoderlab.runs.config import AdamWSection, LearningRate, Seed, WandbSection
from encoderlab.runs.optim import resolve_dtype, slow_dtype_note
from encoderlab.tasks import registry

if TYPE_CHECKING:
    import torch

# What a task may change for itself: its length, its number of steps or epochs, its batch. The grid (LRs, seeds),
# the optimizer and the selection rule stay the same for every task, or the tasks' scores would not compare.
# What `encoderlab sweep` and `finetune` (and the API) use when no protocol is given: shipped with the package.
DEFAULT_PROTOCOL = CONFIGS / "eval" / "demo.yaml"
TASK_OVERRIDABLE = ("max_steps", "epochs", "batch_size", "max_length", "warmup_fraction")

# A variant is a named way of training and scoring every family: `variant: authors` in a protocol sets what the
# paper authors' evaluation code does. Each family declares its own part (tasks/families/, `Family.variants`); the
# settings every family shares are here. The defaults of `Protocol` are the variant `encoderlab`.
DEFAULT_VARIANT = "encoderlab"
SHARED_VARIANTS = {"authors": {"inputs": "eos", "batch_order": "random", "lr_choice": "per_seed"}}


def variants() -> dict[str, dict[str, Any]]:
    """Every variant's name -> the protocol settings it gives: the shared ones and each registered family's.
    `encoderlab` gives the defaults of every setting another variant sets."""
    names = [*SHARED_VARIANTS, *(name for record in registry.families() for name in record.variants)]
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(n for n in names if n != DEFAULT_VARIANT):
        settings = dict(SHARED_VARIANTS.get(name, {}))
        for record in registry.families():
            settings = deep_merge(settings, _plain(record.variants.get(name, {})))
        out[name] = settings
    defaults = Protocol().model_dump()
    every: dict[str, Any] = {}
    for settings in out.values():
        every = deep_merge(every, settings)
    return {DEFAULT_VARIANT: _restricted(defaults, every), **out}


def _restricted(values: dict, shape: dict) -> dict:
    """`values` at the keys (nested) that `shape` has."""
    return {k: _restricted(values[k], v) if isinstance(v, dict) else values[k] for k, v in shape.items()}


def _plain(settings) -> dict:
    """A family's declared settings (read-only mappings) as plain nested dicts."""
    return {k: _plain(v) if hasattr(v, "items") else v for k, v in settings.items()}


class RetrievalSection(BaseModel):
    """How retrieval tasks are trained and scored. The defaults are encoderlab's own protocol; the authors' (see
    docs/paper.md) is `train_on: msmarco, corpus: judged_any_split, relevance: binary, loss: mnrl, ndcg: top10_only`."""

    model_config = ConfigDict(extra="forbid")
    train_on: str | None = Field(None, description="a retrieval task whose train pairs train one model per LR and "
                                 "seed, scored on every retrieval task of the sweep (None: each on its own train)")
    corpus: Literal["all", "judged", "judged_any_split"] = Field(
        "all", description="judged: search only the documents that appear in the split's relevance judgements; "
        "judged_any_split: one corpus for validation and test, every document of their judgements (any grade), as the "
        "authors' code searches")
    relevance: Literal["graded", "binary"] = Field("graded", description="binary: every grade >= 1 counts as 1")
    loss: Literal["infonce", "mnrl"] = Field("infonce", description="infonce: learned temperature, false negatives "
                                             "masked; mnrl: cosine x 20, in-batch negatives, nothing masked")
    ndcg: Literal["standard", "top10_only"] = Field(
        "standard", description="standard: NDCG@10 with the ideal over every relevant document; top10_only: "
        "scikit-learn's ndcg_score on the 10 top-ranked documents (ideal over the relevant ones retrieved), the "
        "authors' metric; the record holds both either way")

    def scoring(self) -> dict[str, str]:
        """What a retrieval task's own training and scoring follow (all but where its model is trained)."""
        return self.model_dump(exclude={"train_on"})


class TokensSection(BaseModel):
    """How token classification is labelled, headed and scored (the authors' choice: all_subwords, dropout 0.1,
    sentence_macro_f1; the record holds seqeval's entity F1 and the per-sentence macro F1 either way)."""

    model_config = ConfigDict(extra="forbid")
    labels: Literal["first_subword", "all_subwords"] = Field(
        "first_subword", description="first_subword: a word's tag on its first sub-word, the others ignored; "
        "all_subwords: every sub-word carries its word's tag and a word's prediction is its sub-words' majority vote")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout before the token head (tokens and tagging QA)")
    metric: Literal["entity_f1", "sentence_macro_f1"] = Field(
        "entity_f1", description="entity_f1: seqeval's entity micro F1; sentence_macro_f1: scikit-learn's macro F1 "
        "over the tags of each sentence, averaged over sentences")


class QASection(BaseModel):
    """How extractive QA is framed (the authors' choice: tagging; the record holds SQuAD F1/EM either way)."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["spans", "tagging"] = Field(
        "spans", description="spans: start/end head over stride-128 windows, n-best, SQuAD F1; tagging: the "
        "answer's tokens tagged 1 by a 2-label token head on one truncated input, F1 between the predicted and gold "
        "sets of token positions (empty = {0})")


class Protocol(BaseModel):
    """Up to `max_steps` or `epochs` over the training set, whichever comes first; `lrs` x `seeds` runs per task;
    the LR is chosen on `selection_split` as `lr_choice` says."""

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    max_steps: int = Field(1000, gt=0)
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(32, gt=0)
    eval_batch_size: int = Field(128, gt=0)
    lrs: list[LearningRate] = Field(default_factory=lambda: [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4], min_length=1)
    seeds: list[Seed] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    warmup_fraction: float = Field(0.1, ge=0, lt=1)
    decay: Literal["linear", "constant"] = "linear"
    optim: AdamWSection = AdamWSection()
    max_length: int | Literal["auto"] = Field(512, description="tokens; auto: round(max_length_fraction x the "
                                              "checkpoint's max_position_embeddings), as the authors' code does")
    max_length_fraction: float = Field(0.99, gt=0, le=1)
    max_length_by_family: dict[str, int] = Field(default_factory=dict)
    selection_split: Literal["validation"] = "validation"
    dtype: Literal["bf16", "fp32", "auto"] = Field(
        "bf16", description="bf16 (autocast) or fp32; auto: bf16 where the default device (CUDA when available) "
        "multiplies bf16 natively, else fp32; resolved when the protocol is read, so records hold what ran")
    weights: Literal["fp32", "bf16"] = Field("fp32", description="fp32: fp32 weights and AdamW state under "
                                             "`dtype` autocast; bf16: the weights and AdamW state are bf16")
    sentence_pairs: Literal["segments", "labelled"] = Field(
        "segments", description="segments: `<bos> a <eos> b <eos>`; labelled: one text 'Premise: a\nHypothesis: b'")
    holdout: Literal["encoderlab", "train_test_split"] = Field(
        "encoderlab", description="validation where the test set is hidden: encoderlab (5% of train, seed 1234; "
        "whole articles for QA) or datasets' train_test_split(train_size=0.95, seed=42) of the train rows")
    max_train_examples: int | None = Field(None, gt=0, description="subsample train (CPU demos); seeded")
    max_eval_examples: int | None = Field(None, gt=0, description="subsample validation/test (CPU demos)")
    max_corpus_documents: int | None = Field(None, gt=0, description="retrieval: judged documents plus random "
                                             "others up to this many (CPU demos; scores rise as the corpus shrinks)")
    retrieval: RetrievalSection = RetrievalSection()
    tokens: TokensSection = TokensSection()
    qa: QASection = QASection()
    inputs: Literal["bos_eos", "eos"] = Field(
        "bos_eos", description="bos_eos: `<bos> text <eos>`; eos: the text without special tokens and EOS appended, "
        "no BOS (the authors')")
    classification_head: Literal["linear", "dense_gelu"] = Field(
        "linear", description="after mean pooling: linear, or Linear(h, h) -> GELU -> Linear (the authors', "
        "transformers' EuroBertForSequenceClassification)")
    batch_order: Literal["length_buckets", "random"] = Field(
        "length_buckets", description="length_buckets: seeded batches of similar lengths (less padding); random: "
        "a seeded random permutation, as the HF Trainer's sampler (the authors')")
    lr_choice: Literal["mean_over_seeds", "per_seed"] = Field(
        "mean_over_seeds", description="how a dataset's score is read off the grid: mean_over_seeds (one LR, best "
        "mean validation over seeds; its seeds' test scores) or per_seed (each seed's best-validation LR, that "
        "run's test score, the mean over seeds: the authors'); reporting only, not part of the protocol key")
    curve_every: int = Field(10, gt=0, description="training loss recorded every N steps")
    wandb: WandbSection | None = Field(None, description="also log each run's scores and the summary to Weights & "
                                       "Biases (one W&B run per sweep); reporting only, not part of the protocol key")
    format_version: int = Field(migrate_protocol.FORMAT, description="the format the protocol is stored in "
                                "(finetuning/migrate_protocol.py); not a setting, not part of the protocol key")
    task_overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per task name: its own " + ", ".join(TASK_OVERRIDABLE) +
        " (e.g. more epochs for a small training set, longer inputs for long documents)")
    _context: int | None = PrivateAttr(None)  # the checkpoint's max_position_embeddings (`with_context`)

    @model_validator(mode="before")
    @classmethod
    def _apply_variant(cls, data: Any) -> Any:
        """`variant: NAME` gives every setting of that variant a value, under what the protocol sets itself. The
        protocol holds the settings, not the name: records and keys are those of the same settings written out."""
        if not isinstance(data, dict) or "variant" not in data:
            return data
        data = dict(data)
        name, known = data.pop("variant"), variants()
        if name not in known:
            raise ValueError(f"variant: {name!r} is not a variant; known: {', '.join(known)}")
        return deep_merge(known[name], data)

    def follows(self) -> list[str]:
        """The variants whose every setting this protocol holds (its defaults are `encoderlab`'s)."""
        mine = self.model_dump()
        return [name for name, settings in variants().items() if _holds(mine, settings)]

    @model_validator(mode="after")
    def _check_format(self) -> Protocol:
        if self.format_version != migrate_protocol.FORMAT:  # a stored one of another is read through its migration
            raise ValueError(f"format_version: {self.format_version}; a protocol is written in format "
                             f"{migrate_protocol.FORMAT} (leave the key out)")
        return self

    @model_validator(mode="after")
    def _check_grid(self) -> Protocol:
        for key in ("lrs", "seeds"):  # a repeated value would run once but count twice, under another record key
            values = getattr(self, key)
            if twice := sorted({v for v in values if values.count(v) > 1}):
                raise ValueError(f"{key}: {twice[0]:g} is given twice; list each value once")
        return self

    @model_validator(mode="after")
    def _resolve_dtype(self) -> Protocol:
        if self.dtype == "auto":  # bf16 weights compute in bf16 wherever they run; else the sweep's default device's
            self.dtype = "bf16" if self.weights == "bf16" else resolve_dtype("auto", "auto")
        return self

    def dtype_note(self, device: torch.device) -> str | None:
        """The line a sweep on `device` says before its first run when its bf16 is not native there (with bf16
        weights `auto` is bf16 too, so the line does not suggest it)."""
        return slow_dtype_note("dtype", self.dtype, device, auto_helps=self.weights != "bf16")

    @model_validator(mode="after")
    def _check_weights(self) -> Protocol:
        if self.weights == "bf16" and self.dtype == "fp32":
            raise ValueError("weights: bf16 computes in bf16; it cannot go with dtype: fp32 (use dtype: bf16)")
        return self

    @model_validator(mode="after")
    def _check_corpus(self) -> Protocol:  # before the overrides, which re-validate the protocol once per task
        if self.retrieval.corpus != "all" and self.max_corpus_documents:
            raise ValueError("max_corpus_documents adds random documents to the searched corpus; retrieval.corpus: "
                             f"{self.retrieval.corpus} searches only the judged ones: set one of them")
        return self

    @model_validator(mode="after")
    def _check_overrides(self) -> Protocol:
        for task, keys in self.task_overrides.items():
            bad = sorted(set(keys) - set(TASK_OVERRIDABLE))
            if bad:
                raise ValueError(f"task_overrides.{task}: {', '.join(bad)} cannot be set per task "
                                 f"(allowed: {', '.join(TASK_OVERRIDABLE)})")
            if found := booleans_for_numbers(Protocol, keys, ("task_overrides", task)):
                where, value = found[0]
                raise ValueError(f"{'.'.join(where)}: takes a number, not {str(value).lower()}")
            try:
                self.for_task(task)  # the values are checked like the protocol's own
            except ValidationError as exc:
                first = exc.errors()[0]
                raise ValueError(f"task_overrides.{task}.{'.'.join(map(str, first['loc']))}: {first['msg']} "
                                 f"(got {first.get('input')!r})") from None
        return self

    def for_task(self, task: str) -> Protocol:
        """The protocol one task runs under: this one with the task's overrides applied (max_length set for a
        task wins over max_length_by_family)."""
        keys = self.task_overrides.get(task)
        if not keys:
            return self
        data = self.model_dump()
        data.update(keys)
        if "max_length" in keys:
            data["max_length_by_family"] = {}
        data["task_overrides"] = {}
        return Protocol.model_validate(data).with_context(self._context)

    def with_context(self, positions: int | None) -> Protocol:
        """This protocol for a checkpoint of `positions` max_position_embeddings (what `max_length: auto` reads)."""
        out = self.model_copy()
        out._context = positions
        return out

    def length_for(self, family: str) -> int:
        if family in self.max_length_by_family or self.max_length != "auto":
            return self.max_length_by_family.get(family, self.max_length)  # type: ignore[return-value]
        if self._context is None:
            raise EncoderlabError("max_length: auto is a fraction of the checkpoint's context; it has none here")
        return round(self.max_length_fraction * self._context)


def _holds(mine: dict, settings: dict) -> bool:
    return all(_holds(mine.get(k) or {}, v) if isinstance(v, dict) else mine.get(k) == v for k, v in settings.items())


def load_protocol(path, overrides: list[str]) -> Protocol:
    """A protocol YAML (default: `DEFAULT_PROTOCOL`) with `--set` overrides, validated: what `sweep` and `finetune`
    run under, from the command line or the API. Every protocol key has a default, so an empty file would run the
    grid of all of them, 6 LRs x 5 seeds of 1000 steps, which no one chose: it is refused."""
    from encoderlab.core.config import load_config
    from encoderlab.core.empty_config import refuse_empty

    if path:
        refuse_empty(path, "protocol file", f"write its settings (base: {DEFAULT_PROTOCOL} and the keys to change) "
                                            f"or give no protocol for the default one ({DEFAULT_PROTOCOL.name})")
    return load_config(Protocol, path or DEFAULT_PROTOCOL, overrides, "the default protocol", shipped="eval")


def one_run(lr: float, seed: int, named: str) -> list[str]:
    """The overrides that make a protocol's grid the single run (lr, seed); an LR that is not a finite number above
    0 and a seed out of range are refused, named as the caller's user gave them: `named` is "--{}" on the command
    line, "{}=" in Python."""
    if not (lr > 0 and math.isfinite(lr)):
        raise EncoderlabError(f"{named.format('lr')}{lr:g}: the learning rate must be a finite number greater than 0")
    if not 0 <= seed < 2**64:
        raise EncoderlabError(f"{named.format('seed')}{seed}: a seed is a whole number from 0 to 2**64 - 1")
    return [f"lrs=[{lr}]", f"seeds=[{seed}]"]
