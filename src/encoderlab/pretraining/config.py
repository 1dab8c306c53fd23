"""The configuration of one pretraining run: each component gets its own section."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from encoderlab.core.arguments import ConfigPath
from encoderlab.core.config import Given
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import folder_name
from encoderlab.pretraining.objectives import Phase, Schedule
from encoderlab.runs.config import AdamWSection, LearningRate, Seed, WandbSection
from encoderlab.runs.config import Section as _Section
from encoderlab.runs.optim import resolve_dtype, slow_dtype_note
from encoderlab.runs.schedule import LRSchedule

if TYPE_CHECKING:
    import torch

    from encoderlab.model.config import ModelConfig


class DataSection(_Section):
    path: ConfigPath = Field("offline", description="packed dataset folder, or 'offline' for the prepared offline "
                             "suite")
    seed: Seed = 0


class ModelSection(BaseModel):
    """`preset` plus any ModelConfig field to override it; vocabulary and special ids come from the data."""

    model_config = ConfigDict(extra="allow")
    preset: str = "tiny"

    @field_validator("preset")
    @classmethod
    def _known(cls, name: str) -> str:  # refused naming the config file and key, before the data is read
        from encoderlab.model.presets import preset_names

        if name.lower() not in preset_names():
            raise ValueError(f"unknown model preset {name!r}; available: {', '.join(preset_names())}")
        return name

    @classmethod
    def extra_keys(cls) -> dict:
        """The keys beside `preset` and their fields (core/config.py `unknown_extras`, `booleans_for_numbers`): those
        of the model config it replaces."""
        from encoderlab.model.config import ModelConfig

        return dict(ModelConfig.model_fields)

    @model_validator(mode="after")
    def _fits_its_preset(self) -> ModelSection:
        """The preset with the fields set here, checked as the model config is, before the data is read: a check
        across keys (`hidden_size=256 must be divisible by num_attention_heads=3`) is refused at the field set here
        that it names, so the file or override that set it is blamed, not the preset. The special ids are checked
        against a vocabulary set here; else the vocabulary is the data's, checked once the data is read."""
        self.checked()
        return self

    def checked(self, tokenizer: dict | None = None) -> ModelConfig:
        """The `ModelConfig` of the preset, the data's vocabulary and special ids (`tokenizer`, the packed data's
        meta entry; without it, the special ids only where a vocabulary is set here), then the fields set here. A
        check across keys that fails is raised at the field set here that it names (a `model_shape` error), else
        as pydantic raised it."""
        from encoderlab.model.config import ModelConfig
        from encoderlab.model.presets import PRESETS

        given = {key: value for key, value in (self.model_extra or {}).items() if key in ModelConfig.model_fields}
        fields = {**PRESETS[self.preset.lower()], **(token_ids(tokenizer) if tokenizer else {}), **given}
        if tokenizer is None and "vocab_size" not in given:
            fields = {key: value for key, value in fields.items() if not key.endswith("_token_id")}
        try:
            return ModelConfig.model_validate(fields)
        except ValidationError as exc:
            across = [e for e in exc.errors() if not e["loc"]]
            if not (given and across):
                raise  # a field's own error (its place names it), or the preset's alone
            data = f" and the data's tokenizer ({tokenizer['vocab_size']} tokens)" if tokenizer else ""
            message = f"with preset {self.preset!r}{data}, " + "; ".join(e["msg"].removeprefix("Value error, ")
                                                                          for e in across)
            named = [key for key in given if re.search(rf"(?<![\w.]){key}=", message)]
            field = min(named, key=lambda key: re.search(rf"(?<![\w.]){key}=", message).start()) if named else None
            raise ValidationError.from_exception_data("model", [{
                "type": PydanticCustomError("model_shape", "{message}", {"message": message}),
                "loc": (field,) if field else (), "input": given[field] if field else given}]) from None


def token_ids(tokenizer: dict) -> dict:
    """The model config's vocabulary and special ids of a tokenizer as the packed data's meta.json records it."""
    return {"vocab_size": tokenizer["vocab_size"], "bos_token_id": tokenizer["bos_id"],
            "eos_token_id": tokenizer["eos_id"], "pad_token_id": tokenizer["pad_id"],
            "mask_token_id": tokenizer["mask_id"]}


class OptimSection(AdamWSection):
    lr: LearningRate = 5e-4
    decay: Literal["matrices", "all"] = Field("matrices", description="which parameters weight decay shrinks: the "
                                              "matrices, or all (norm gains too, as the paper's Optimus does)")


class InitSection(_Section):
    """Where the weights come from. `branch_from` continues a trunk's full state (weights, optimizer, step, data
    position) under this config's schedule and decay, as the paper's budgets and splits were trained;
    `from_weights` loads weights only and starts at step 0 (continued pretraining of a finished model)."""

    branch_from: ConfigPath | None = None
    from_weights: ConfigPath | None = None

    @model_validator(mode="after")
    def _one(self) -> InitSection:
        if self.branch_from and self.from_weights:
            raise ValueError("give branch_from or from_weights, not both")
        return self


class TrainSection(_Section):
    steps: int = Field(..., gt=0)
    global_batch: int | None = Field(None, gt=0, description="sequences per optimizer step (all ranks together)")
    global_batch_tokens: int | None = Field(None, gt=0, description="or: tokens per step (a multiple of seq_len)")
    micro_batch: int | None = Field(None, gt=0, description="sequences per forward; global/micro = accumulation")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto: CUDA when available")
    dtype: Literal["bf16", "fp32", "auto"] = Field(
        "bf16", description="bf16 (autocast) or fp32; auto: bf16 where the device multiplies bf16 natively, else fp32 "
        "(resolved when the config is read: the run folder keeps the choice)")
    seed: Seed = 0
    log_every: int = Field(10, gt=0)
    eval_every: int = Field(0, ge=0, description="held-out loss every N steps; 0: only at the end")
    eval_batches: int = Field(4, ge=0)
    save_every: int = Field(0, ge=0, description="checkpoint every N steps; 0: only at phase switches and end")
    save_at: list[int] = Field(default_factory=list, description="extra checkpoint steps (branch points); kept")
    keep_checkpoints: int = Field(3, ge=1, description="periodic checkpoints kept (phase/stable/final are kept)")
    threads: int | None = Field(None, gt=0, description="torch intra-op threads; default: all cores")
    loss_spike: float | None = Field(
        None, gt=1, description="stop the run (as diverged) when a logged training loss is over this many times the "
        "lowest one logged before for its objective, e.g. 3; off by default. A non-finite loss, gradient norm or "
        "weight always stops the run")
    tensorboard: bool = True
    wandb: WandbSection | None = None
    # Parallelism and speed switches (docs/distributed.md). Off by default: each changes memory, speed or kernels.
    parallel: Literal["none", "ddp", "fsdp2"] = Field(
        "none", description="data parallelism over the processes of a torchrun launch (none: one process)")
    compile: bool = Field(False, description="torch.compile each transformer block (on CPU the parts before and "
                          "after its attention, which stays eager)")
    activation_checkpointing: bool = Field(
        False, description="recompute each block's activations in the backward pass: less memory, more compute")
    attention: Literal["auto", "dense", "varlen", "flex"] = Field(
        "auto", description="how packed documents attend: auto (flex on CUDA; varlen on CPU where it saves work), "
        "dense (SDPA with a block mask), varlen (CPU: per-document buckets), flex (CUDA: "
        "compiled flex_attention)")
    _dtype_asked: str = PrivateAttr("bf16")  # `dtype` as the config gave it ("auto" is resolved when read)

    @property
    def dtype_asked(self) -> str:
        return self._dtype_asked

    @model_validator(mode="after")
    def _batch(self) -> TrainSection:
        if (self.global_batch is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch (sequences) and global_batch_tokens")
        if self.micro_batch is not None and self.global_batch is not None and self.global_batch % self.micro_batch:
            raise ValueError(f"micro_batch {self.micro_batch} must divide global_batch {self.global_batch}")
        return self

    @model_validator(mode="after")
    def _resolve_dtype(self) -> TrainSection:
        self._dtype_asked = self.dtype
        self.dtype = resolve_dtype(self.dtype, self.device)
        return self

    def dtype_note(self, device: torch.device) -> str | None:
        """The line a run on `device` says before its first step when its bf16 is not native there."""
        return slow_dtype_note("train.dtype", self.dtype, device)

    def sequences_per_step(self, seq_len: int) -> int:
        if self.global_batch is not None:
            return self.global_batch
        assert self.global_batch_tokens is not None
        if self.global_batch_tokens % seq_len:
            raise EncoderlabError(f"train.global_batch_tokens={self.global_batch_tokens} is not a multiple of the "
                                  f"data's seq_len {seq_len}: use {self.global_batch_tokens // seq_len * seq_len}")
        return self.global_batch_tokens // seq_len


def _schedule(value: object) -> Schedule:
    if not isinstance(value, str):
        raise ValueError("must be a schedule such as 'mlm40' or 'clm:25%,mlm40:75%'")
    return Schedule.parse(value)


# Written and read as the user's string ('clm:25%,mlm40:75%'), held parsed: its errors are config errors.
ObjectiveSchedule = Annotated[Schedule, PlainValidator(_schedule), PlainSerializer(lambda s: s.text, return_type=str),
                              WithJsonSchema({"type": "string"})]


class PretrainConfig(_Section):
    name: str = "run"
    out_dir: ConfigPath = Field("runs", description="the run folder is OUT_DIR/NAME")
    data: DataSection = DataSection()
    model: ModelSection = ModelSection()
    init: InitSection = InitSection()
    optim: OptimSection = OptimSection()
    lr_schedule: LRSchedule = LRSchedule()
    train: TrainSection
    # After `train`: its lengths are checked against train.steps, which pydantic has validated by then.
    objective: ObjectiveSchedule = Field("mlm40", validate_default=True,
                                         description="e.g. 'mlm40', 'clm', or phases 'clm:25%,mlm40:75%'")

    _name_is_one_folder = field_validator("name")(folder_name)
    # (file, overrides) that `validate` read it from: a model field that the data's ids do not fit is refused once
    # the data is read, blamed on what set it (core/config.py `blamed_later`)
    _given: Given = PrivateAttr(default_factory=Given)

    @model_validator(mode="after")
    def _steps_fit_the_run(self) -> PretrainConfig:
        steps = self.train.steps
        if self.lr_schedule.warmup_steps > steps:
            raise ValueError(f"lr_schedule.warmup_steps={self.lr_schedule.warmup_steps} is longer than the run "
                             f"(train.steps={steps}): the LR would never reach its peak; use at most {steps}")
        late = sorted(s for s in self.train.save_at if not 0 < s <= steps)
        if late:
            raise ValueError(f"train.save_at={late} lies outside the run's steps 1..{steps} (train.steps)")
        return self

    def schedule_note(self) -> str | None:
        """The line a run says when it is too short for its WSD warmup and decay both: the decay is cut short."""
        schedule, steps = self.lr_schedule, self.train.steps
        if schedule.kind != "wsd" or schedule.warmup_steps + schedule.decay_steps <= steps:
            return None
        start = schedule.decay_start(steps)
        left = steps - start
        cut = (f"the decay starts when the warmup ends, at step {start}, and lasts {left} step{'s' * (left != 1)}"
               if left else "the warmup ends with the run: the LR never decays")
        return (f"lr_schedule: warmup_steps {schedule.warmup_steps} + decay_steps {schedule.decay_steps} exceed "
                f"train.steps {steps}: {cut}")

    @field_validator("objective")
    @classmethod
    def _fits_the_run(cls, schedule: Schedule, info: ValidationInfo) -> Schedule:
        if "train" in info.data:  # else train's own error is reported
            schedule.phases(info.data["train"].steps)
        return schedule

    @property
    def phases(self) -> list[Phase]:
        return self.objective.phases(self.train.steps)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name


def load_pretrain_config(path: str | Path, overrides: list[str]) -> PretrainConfig:
    """A pretraining YAML with `--set` overrides, validated: what `pretrain` runs, from the command line or the API.
    An empty file is refused as such, not as missing its `train` section."""
    from encoderlab.core.config import load_config
    from encoderlab.core.empty_config import refuse_empty
    from encoderlab.core.io import CONFIGS

    refuse_empty(path, "pretraining config", f"write its settings (base: {CONFIGS / 'pretrain' / 'cpu-study.yaml'} "
                                             "and the keys to change)")
    return load_config(PretrainConfig, path, overrides, str(path), shipped="pretrain")
