"""What a task family is, in one record, and the registry of the families encoderlab knows.

A family (classification, tokens, qa, retrieval, or one a user registers) is declared once, by a `Family` record
made at the end of its own module (tasks/families/) and passed to `register`. Everything the rest of encoderlab asks
about a family is a field of that record: its category code in study reports, the schema of its task files, how its
tasks load (an offline folder, the paper's datasets it owns, a user's task file), how many sequences one example
has, its baselines, the field's standard metric, its variants (the settings a protocol's `variant:` gives its
tasks), how a fine-tuned model of it is saved and described, and whether MTEB can score it (`mteb`). Nothing
outside the family's module and this registry names a family: code that depends on one looks its record up with
`family(name)`, which refuses an unknown name in one line naming the known ones.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

from encoderlab.core.errors import DataError, option_name

SPLIT_FILES = ("train.jsonl", "validation.jsonl", "test.jsonl")
TRANSFORMERS = "transformers"
SENTENCE_TRANSFORMERS = "sentence-transformers"


def not_saved() -> str:
    """The end of a refusal to save a fine-tuned model as a stock class, read at each refusal: the caller (command
    line or Python API) names the options its own way."""
    return f"nothing was run: leave {option_name('save')} / {option_name('save-models')} out to fine-tune and record it"


@dataclass(frozen=True)
class Export:
    """The stock class that computes a fine-tuned run of the family and where the run's weights go in it."""
    cls: str  # the transformers class, e.g. "EuroBertForSequenceClassification"
    kind: str  # whose config the class reads: a hub/hf.py kind ("eurobert", "llama", ...)
    head: Mapping[str, str]  # our head's parameter -> the class's (empty: the body alone)
    config: Mapping[str, Any] = field(default_factory=dict)  # set on the class's config
    library: str = TRANSFORMERS  # or SENTENCE_TRANSFORMERS: a sentence-transformers folder around the body


@dataclass(frozen=True)
class Body:
    """What a fine-tuned run's export is built on (hub/finetuned.py decides it from the checkpoint)."""
    kind: str  # "eurobert" when EuroBertModel holds the body, else its own family's kind
    prefix: str  # that kind's class-name prefix: "EuroBert", "Llama", ...
    labels: tuple[str, ...] | None = None  # the task's label names, when it has some
    # A transformers encoder evaluated as it is (model/transformers_body.py): `kind` is its model_type, and its own
    # classes hold the run, heads named as they name them (hub/finetuned_transformers.py checks that they do)
    transformers: bool = False

    @property
    def bidirectional(self) -> dict[str, bool]:
        """What a decoder family's config needs to attend both ways (EuroBERT and encoders do by themselves)."""
        return {} if self.kind == "eurobert" or self.transformers else {"is_causal": False}

    @property
    def encoder(self) -> bool:
        """Whether the body's own classes name a token head `classifier` (EuroBERT's and the encoders')."""
        return self.kind == "eurobert" or self.transformers

    @property
    def named_labels(self) -> dict[str, Any]:
        if not self.labels:
            return {}
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels)),
                "label2id": {name: i for i, name in enumerate(self.labels)}}


@dataclass(frozen=True)
class Card:
    """How a fine-tuned model of the family is described on its model card (hub/finetuned_card.py)."""
    hub_task: str  # the Hub's pipeline tag and model-index task type, e.g. "text-classification"
    protocol_keys: tuple[str, ...]  # the protocol settings that shape the family's inputs, head or metric
    decoding: str  # what encoderlab does with the model's outputs, which a user does the same way
    usage: Callable[[str, str], list[str]]  # (class, model name) -> the "Use" section's code lines


def transformers_usage(auto: str, call: str) -> Callable[[str, str], list[str]]:
    """A card's "Use" code for a model that loads through transformers' `auto` class (AutoModelFor...): `call` is
    one forward and what to read from it."""
    return partial(_transformers_usage, auto, call)


def _transformers_usage(auto: str, call: str, cls: str, name: str) -> list[str]:
    return ["```python", f"from transformers import AutoTokenizer, {auto}",
            f'tok = AutoTokenizer.from_pretrained("{name}")',
            f'model = {auto}.from_pretrained("{name}")  # {cls}', call, "```"]


@dataclass(frozen=True)
class Family:
    """Everything encoderlab knows about one task family."""
    name: str  # as task files, task.json and records name it
    category: str  # the code study reports group its tasks by: SC, TC, QA, IR
    settings: type  # the pydantic model of its task files (tasks/taskfile.py TaskFileSettings, `family: Literal`)
    # The loaders make a task with its identity: its name and the `fingerprint=` keyword they are given (tasks/__init__)
    load_user: Callable[..., Any]  # (TaskFile, holdout, *, fingerprint) -> EvalTask
    export: Callable[[Any, Body], Export]  # (protocol, body) -> Export, or EncoderlabError naming what would save
    card: Card
    standard_metric: str  # the field's standard metric, as reports name the "standard" score
    baselines: Mapping[str, str]  # {name: how tables name it} of its baselines in table order, the trivial one first
    metric_definitions: Mapping[str, str] = field(default_factory=dict)  # its own metrics' one-line definitions
    sequences: int = 1  # sequences one training example feeds the model (retrieval: a query and a document)
    load_offline: Callable[..., Any] | None = None  # (offline root, name, *, fingerprint) -> EvalTask
    data_files: tuple[str, ...] = SPLIT_FILES  # an offline task folder's data files, beside task.json
    paper: Mapping[str, str] = field(default_factory=dict)  # the paper's datasets it owns -> default Hub id
    load_paper: Callable[..., Any] | None = None  # (dataset, local copy or None, holdout, *, fingerprint)
    train_pairs: Mapping[str, str] = field(default_factory=dict)  # paper dataset -> Hub id of its training pairs
    check_file: Callable[[Any, str], None] | None = None  # (settings, where): refuses a task file, one line
    # (task file) -> what its fingerprint adds for how the family reads its data, where that reading changed since
    # records were made (tasks/taskfile.py `TaskFile.fingerprint`): {} wherever the reading is unchanged
    reading: Callable[[Any], dict] | None = None
    # (setting getter of a task or record) -> the name of its trivial baseline, where not always baselines[0]
    trivial_baseline: Callable[[Callable[[str], Any]], str] | None = None
    split_baselines: Callable[[Any, str], dict] | None = None  # (task, split) -> {name: scores}: no fit, no text
    lexical_baselines: Callable[[Any, Any], dict] | None = None  # (task, tokenizer or None) -> {split: {name: ..}}
    # Named ways of training and scoring the family, as protocol settings (nested as in the protocol): what
    # `variant: NAME` in a protocol sets for its tasks, e.g. {"authors": {"qa": {"format": "tagging"}}}. A family
    # without a variant of that name follows the protocol's defaults under it.
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # (task) -> the task as an MTEB custom task, scored on frozen embeddings (`encoderlab mteb`, tasks/mteb_tasks.py);
    # None: the family's tasks are not run through MTEB
    mteb: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        # read-only, as the record is
        for name in ("paper", "train_pairs", "baselines", "metric_definitions", "variants"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def trivial_name(self, setting: Callable[[str], Any]) -> str:
        """The trivial baseline of a task or record whose settings (`scheme`, ...) `setting(key)` reads."""
        return self.trivial_baseline(setting) if self.trivial_baseline else next(iter(self.baselines))


_REGISTRY: dict[str, Family] = {}


def register(record: Family) -> Family:
    """Make a family known by its name; registering another record under a known name or category is refused."""
    if record.name not in _builtin_names():
        _builtins()  # the built-in families come first in every report, whoever registers first
    for known in _REGISTRY.values():
        if known.name != record.name and known.category == record.category:
            raise ValueError(f"family {record.name!r}: category {record.category!r} is family {known.name!r}'s")
    if record.name in _REGISTRY and _REGISTRY[record.name] != record:
        raise ValueError(f"family {record.name!r} is registered already")
    _REGISTRY[record.name] = record
    return record


def unregister(name: str) -> None:
    """Forget a family a test registered (the built-in ones stay)."""
    if name in _builtin_names():
        raise ValueError(f"family {name!r} is built in")
    _REGISTRY.pop(name, None)


def family(name: str) -> Family:
    """The record of family `name`; an unknown one is refused, naming the known ones."""
    _builtins()
    if name not in _REGISTRY:
        raise DataError(f"unknown task family {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def families() -> list[Family]:
    """Every registered family, the built-in ones first, in the order of their categories in reports."""
    _builtins()
    return list(_REGISTRY.values())


def categories() -> list[str]:
    """The registered families' category codes in report order (SC, TC, QA, IR, then any registered later)."""
    return [record.category for record in families()]


def by_category(category: str) -> Family:
    """The family whose tasks a report groups under `category` (SC, TC, QA, IR, ...)."""
    for record in families():
        if record.category == category:
            return record
    raise DataError(f"unknown task category {category!r}; known: {', '.join(f.category for f in families())}")


def paper_family(dataset: str) -> Family | None:
    """The family that owns one of the paper's datasets (sst2, conll2003, squad, msmarco, ...), or None."""
    return next((f for f in families() if dataset in f.paper), None)


def _builtins() -> None:
    # The four families' modules register themselves when imported: imported here, on the first lookup, so that
    # they are always known and each family module can import this one.
    import encoderlab.tasks.families  # noqa: F401


def _builtin_names() -> tuple[str, ...]:
    from encoderlab.tasks.families import BUILT_IN

    return BUILT_IN
