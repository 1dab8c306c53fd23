"""A study as data: model sizes x objectives x budgets x CLM/MLM splits x CPT arms x checkpoints x tasks.
Or models that exist already (`checkpoints:`), evaluated and compared without training them.

A study file names a base pretraining config (data, optimiser, LR schedule, batch: everything the arms share) and
says which models to train from it. The planner (plan.py) turns that into a graph of pretraining runs that share
their stable-LR prefixes, as the paper trained them; the runner executes it; the report reads its records.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from encoderlab.core.arguments import ConfigPath
from encoderlab.core.config import ConfigError, Given, load_yaml, validate
from encoderlab.core.empty_config import refuse_empty
from encoderlab.core.io import folder_name
from encoderlab.tasks import is_local_source


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelGroup(_Section):
    """Single-objective models trained for the study's full budget, one per size x objective."""

    sizes: list[str] = Field(..., min_length=1)
    objectives: list[str] = Field(..., min_length=1, description="e.g. clm, mlm40, mlm20")


class Intermediate(_Section):
    """Checkpoints of full-budget models evaluated on the way (data efficiency): their stable, undecayed states."""

    steps: list[int] = Field(..., min_length=1)
    sizes: list[str] | None = Field(None, description="default: every size")
    objectives: list[str] | None = Field(None, description="default: every objective")


class Splits(_Section):
    """Biphasic models: `first` up to a switch step, then `then`, under one LR schedule (docs/paper.md#pretraining).
    The switches are either shares of the steps (`shares` x `budgets`, `share_of`) or named per budget
    (`switch_steps`)."""

    sizes: list[str] = Field(..., min_length=1)
    first: str = "clm"
    then: str = "mlm40"
    shares: list[float] | None = Field(None, description="percent of steps in `first`: 0 ... 100")
    budgets: list[int] | None = Field(None, description="with `shares`: the budgets (steps) they apply to")
    share_of: Literal["stable", "total"] = Field(
        "stable", description="'stable': the share of the steps before decay, so 25% of 42K with a 2K decay "
        "switches at 10K; 'total': of all steps")
    switch_steps: dict[int, list[int]] | None = Field(
        None, description="budget -> the steps where `first` hands over to `then`, instead of shares: 0 is `then` "
        "alone, the budget `first` alone (the paper's released models: 12000: [0, 3000, 6000, 9000, 12000], ...)")

    @model_validator(mode="after")
    def _check(self) -> Splits:
        if (self.shares is None) == (self.switch_steps is None):
            raise ValueError("give either shares (with budgets) or switch_steps (budget -> switch steps), not both")
        if self.switch_steps is not None:
            if {"budgets", "share_of"} & self.model_fields_set:
                raise ValueError("switch_steps names the budgets and the switches: drop budgets and share_of")
            bad = {b: s for b, s in self.switch_steps.items() if b <= 0 or not s or any(not 0 <= x <= b for x in s)}
            if bad:
                raise ValueError(f"switch_steps {bad}: each budget needs switch steps within [0, budget]")
            return self
        if not self.shares or not self.budgets:
            raise ValueError("shares and budgets must both be given and non-empty")
        bad = [s for s in self.shares if not 0 <= s <= 100]
        if bad:
            raise ValueError(f"shares must be percentages in [0, 100], got {bad}")
        return self

    def switches(self) -> dict[int, list[int] | None]:
        """budget -> its explicit switch steps, or None where they follow from `shares` and `share_of`."""
        return dict(self.switch_steps) if self.switch_steps is not None else dict.fromkeys(self.budgets or [])


class CPT(_Section):
    """Continued pretraining (weights only: new optimizer, warmup and decay) of decayed full-budget models, or of
    an imported decoder (source `imported`, for a size that names one)."""

    sizes: list[str] = Field(..., min_length=1)
    sources: list[str] = Field(..., min_length=1, description="objectives of the full-budget models to continue, "
                               "or 'imported': the imported model of that name")
    objective: str = "mlm40"
    steps: list[int] = Field(..., min_length=1)
    lr_schedule: dict = Field(default_factory=dict, description="overrides of the base lr_schedule for CPT runs")
    optim: dict = Field(default_factory=dict, description="overrides of the base optim for CPT runs (e.g. lr)")


class Imported(_Section):
    """A decoder imported with `encoderlab import-hf` before anything trains; its name is a size of the study."""

    source: ConfigPath = Field(..., description="import-hf SRC: a transformers folder, a .gguf file or 'smollm2'")
    seq_len: int = Field(512, gt=0, description="windows of the pretraining text packed with its tokenizer")
    shape: dict | None = Field(None, description="its model_config.json fields, only to plan before the import "
                               "(a folder's config.json is read instead when there is one)")


class EvaluationSection(_Section):
    protocol: ConfigPath = Field(..., description="an evaluation protocol YAML (configs/eval/), relative to the study")
    tasks: list[str] = Field(..., min_length=1, description="task names, 'offline', paper datasets or task YAMLs")
    intermediate_tasks: list[str] | None = Field(
        None, description="tasks for intermediate checkpoints (default: `tasks`)")
    random_init_tasks: list[str] | None = Field(
        None, description="tasks for the random-init baselines (default: `intermediate_tasks`); the report's "
        "sanity check compares each final model with its baseline on the datasets both ran")
    mteb: list[str] | None = Field(
        None, description="offline retrieval or classification tasks or MTEB task names: each model's final "
        "checkpoint (and each random-init baseline) is also scored by the mteb library, frozen (docs/mteb.md; needs "
        "pip install 'encoderlab[mteb]'); the report puts the scores beside the tasks' baselines")


COMPARISON_KINDS = ("versus", "stability", "efficiency", "cpt")
FINDINGS = ("paper",)  # the named sets of comparisons a study turns on (study/paper_findings.py: "paper")


class ComparisonSpec(_Section):
    """One question the report answers, each the study's models by name: an evaluation label as `study plan` lists
    it (`micro-mlm40-1200`, `micro-random`, `smollm2-imported`, a `checkpoints:` name) or a run at one of its
    evaluated steps (`micro-mlm40-1200@300`). Exactly one of the kinds."""

    versus: list[str] | None = Field(None, min_length=2, max_length=2, description="[A, B]: A - B per category "
                                     "with its 95% interval")
    stability: list[str] | None = Field(None, min_length=2, max_length=2, description="[A, B]: the spread of "
                                        "their fine-tuning runs over LRs and seeds, per category (Levene's test)")
    efficiency: list[str] | None = Field(None, min_length=1, description="runs: their scores at every evaluated "
                                         "checkpoint, and each pair's A - B at the steps both were evaluated")
    cpt: str | None = Field(None, description="a continued-pretraining run: it against the model it started from")
    title: str | None = Field(None, description="the section's heading (default: what it compares)")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, value):
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(cls.model_fields))
            kinds = [k for k in COMPARISON_KINDS if value.get(k) is not None]
            if unknown:
                raise ValueError(f"unknown key {', '.join(map(repr, unknown))} (allowed: "
                                 f"{', '.join(cls.model_fields)})")
            if len(kinds) != 1:
                raise ValueError(f"a comparison is exactly one of {', '.join(COMPARISON_KINDS)}: this one gives "
                                 f"{' and '.join(kinds) or 'none'}")
        return value

    @property
    def kind(self) -> str:
        return next(k for k in COMPARISON_KINDS if getattr(self, k) is not None)

    @property
    def models(self) -> list[str]:
        value = getattr(self, self.kind)
        return [value] if isinstance(value, str) else list(value)


class DataShape(_Section):
    """What the planner assumes when the data is not prepared yet (FLOPs need the vocabulary and window)."""

    vocab_size: int = Field(..., gt=0)
    seq_len: int = Field(..., gt=0)


class StudySpec(_Section):
    name: str
    out_dir: ConfigPath = Field("studies", description="the study folder is OUT_DIR/NAME")
    pretrain: ConfigPath | None = Field(None, description="base pretraining config YAML, relative to the study file "
                                 "(needed by every section that trains: all but `checkpoints`)")
    pretrain_overrides: dict = Field(default_factory=dict, description="merged over the base config")
    size_overrides: dict[str, dict] = Field(default_factory=dict, description="per size, merged over the base")
    budget: int | None = Field(None, gt=0, description="steps of the full-budget models (the paper's 42K); needed "
                               "by every section that trains")
    models: list[ModelGroup] = Field(default_factory=list)
    intermediate: Intermediate | None = None
    splits: list[Splits] = Field(default_factory=list, description="one group or a list of groups")
    cpt: CPT | None = None
    random_init: list[str] = Field(default_factory=list, description="sizes evaluated from random weights")
    imported: dict[str, Imported] = Field(default_factory=dict, description="name -> import-hf SRC (or a mapping "
                                          "with source, seq_len, shape); each is also evaluated as it is")
    checkpoints: dict[str, ConfigPath] = Field(default_factory=dict, description="NAME: an existing model to evaluate "
                                        "as it is, no pretraining: a checkpoint folder, a run folder (its latest "
                                        "checkpoint), or an import-hf SRC (a transformers folder, a .gguf file)")
    evaluation: EvaluationSection
    data_shape: DataShape | None = None
    paper_results: ConfigPath | None = Field(None, description="published numbers to print beside ours (YAML)")
    comparisons: list[ComparisonSpec] = Field(default_factory=list, description="the questions the report "
                                              "answers, one section each (docs/studies.md, Comparisons)")
    findings: Literal[FINDINGS] | None = Field(None, description="a named set of comparisons with its own wording: "
                                               "'paper', the paper's five findings")

    _name_is_one_folder = field_validator("name")(folder_name)
    # the study file `validate` read it from: a key it sets in a run's pretraining config is blamed there
    # (study/grid.py `study_overrides`), not on the pretraining config file
    _given: Given = PrivateAttr(default_factory=Given)

    def trained_sizes(self) -> set[str]:
        """Every model size the study trains or initialises: its models, splits, random inits and CPT arms."""
        return {s for g in (*self.models, *self.splits) for s in g.sizes} | set(self.random_init) | set(
            self.cpt.sizes if self.cpt else [])

    @field_validator("splits", mode="before")
    @classmethod
    def _groups(cls, value):
        return [] if value is None else [value] if isinstance(value, dict) else value

    @field_validator("imported", mode="before")
    @classmethod
    def _sources(cls, value):
        if isinstance(value, dict):
            return {k: {"source": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check(self) -> StudySpec:
        if not (self.models or self.splits or self.cpt or self.imported or self.checkpoints):
            raise ValueError("a study needs at least one of models, splits, cpt, imported, checkpoints")
        trains = [key for key in ("models", "splits", "cpt", "imported", "random_init", "intermediate")
                  if getattr(self, key)]
        missing = [key for key in ("pretrain", "budget") if getattr(self, key) is None]
        if trains and missing:
            raise ValueError(f"{' and '.join(missing)} must be given: {', '.join(trains)} train models from the "
                             "base pretraining config (only `checkpoints` needs neither)")
        late = [s for s in (self.intermediate.steps if self.intermediate else []) if not 0 < s < self.budget]
        if late:  # the budget's own step is the final, decayed model, evaluated as such
            raise ValueError(f"intermediate.steps {late} must lie between 0 and the budget ({self.budget}), both "
                             "excluded: the budget's last step is the final model")
        from encoderlab.model.presets import preset_names

        for section, name in [*(("imported", n) for n in self.imported), *(("checkpoints", n) for n in
                                                                             self.checkpoints)]:
            if name.lower() in preset_names() or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"{section} name {name!r} must be a folder name (letters, digits, _ . -) that is "
                                 f"not a model preset ({', '.join(preset_names())})")
        trained = self.trained_sizes()
        for size in self.size_overrides.keys() - trained:  # a misspelt size would run with the base recipe
            raise ValueError(f"size_overrides.{size}: the study trains no model of size {size!r} (its sizes: "
                             f"{', '.join(sorted(trained)) or 'none'}), so these overrides would be ignored")
        if self.cpt and "imported" in self.cpt.sources:
            unknown = [s for s in self.cpt.sizes if s not in self.imported]
            if unknown:
                raise ValueError(f"cpt.sources 'imported' needs every cpt size to name an imported model: "
                                 f"{unknown} {'is' if len(unknown) == 1 else 'are'} not in imported "
                                 f"({', '.join(self.imported) or 'none'})")
        return self


def load_study(path: str | Path) -> tuple[StudySpec, Path]:
    """The spec and the folder its relative paths are resolved against."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: give a study file such as configs/studies/demo.yaml")
    names = "a study names `name`, `evaluation` and the models it trains or evaluates (docs/studies.md)"
    refuse_empty(path, "study file", f"write its settings: {names}")
    data = load_yaml(path, shipped="studies")
    if not {"name", "evaluation"} & set(data):  # e.g. the released-model list beside the studies
        held = ', '.join(map(str, data)) or 'nothing'
        raise ConfigError(f"{path} is not a study file: {names}; this file holds {held}")
    spec = validate(StudySpec, data, where=str(path))
    base = path.resolve().parent
    ev = spec.evaluation
    for key in ("tasks", "intermediate_tasks", "random_init_tasks"):
        if (tasks := getattr(ev, key)) is not None:
            setattr(ev, key, [_task_from(base, task) for task in tasks])
    return spec, base


def _task_from(base: Path, task: str) -> str:
    """A study's task file, or a paper dataset's local copy (`squad=DIR`), found relative to the study file as its
    other paths are, not to wherever the command runs. A Hub id (`squad_v2=rajpurkar/squad_v2`) is no path: it is
    passed on as written (tasks `is_local_source`, the rule the loaders use)."""
    name, eq, source = task.partition("=")
    if name.endswith((".yaml", ".yml")) and not eq:
        return str(resolve_path(base, name))
    if eq and source and is_local_source(source, base):
        return f"{name}={resolve_path(base, source)}"
    return task


def resolve_path(base: Path, value: str) -> Path:
    p = Path(value).expanduser()  # `~/models/X` in a preset means the home folder
    return p if p.is_absolute() else (base / p)
