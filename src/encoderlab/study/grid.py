"""The models a study asks for, before any sharing: the full-budget models, the CLM/MLM split arms and the CPT
arms, each a `PretrainRun` with its objective schedule and step budget (plan.py then shares their trunks).
The same model asked for twice (a 0% split is the MLM model) is one run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from encoderlab.core.config import GIVEN, ConfigError, blamed_field, deep_merge, validate
from encoderlab.core.errors import prepare_command
from encoderlab.model.config import ModelConfig
from encoderlab.model.presets import preset, preset_names
from encoderlab.pretraining import objectives
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.study.spec import StudySpec


def steps_label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


@dataclass
class PretrainRun:
    """One pretraining run folder: a model of the study, trained from `branch_step` (0: from its init) to `steps`."""

    name: str
    size: str
    kind: str  # "model" (one objective), "split" (first then second) or "cpt"
    schedule: list[tuple[str, int]]  # (objective, first step), absolute, covering [0, steps)
    steps: int
    stable_end: int  # steps before this is where the LR is the same for any budget (WSD: the decay start)
    init: str | None = None  # CPT: the model whose final weights it starts from
    imported: str | None = None  # CPT of an imported model: its name (the weights of STUDY/imported/NAME)
    parent: str | None = None
    branch_step: int = 0
    save_at: set[int] = field(default_factory=set)
    tokens_per_step: int = 0
    split_shares: dict[str, float] = field(default_factory=dict)  # split group 'FIRST-THEN' -> percent in FIRST
    flops: float = 0.0  # of the steps this run trains itself
    naive_flops: float = 0.0  # were it trained alone from its init

    @property
    def objective(self) -> str:
        if len(self.schedule) == 1:
            return self.schedule[0][0]
        parts = [f"{obj}:{nxt - start}" for (obj, start), (_, nxt) in zip(self.schedule, self.schedule[1:])]
        return ",".join(parts + [f"{self.schedule[-1][0]}:rest"])

    def objective_at(self, step: int) -> str:
        return [obj for obj, start in self.schedule if start <= step][-1]

    def group(self) -> tuple:
        return (self.size, self.init, self.imported)


class Grid:
    """Collects the runs of a study (`wanted`) and the full-budget model of each (size, objective) (`full`)."""

    def __init__(self, spec: StudySpec, base: dict, shapes: dict[str, dict]) -> None:
        self.spec, self.base, self.shapes = spec, base, shapes
        unknown = sorted(s for s in spec.trained_sizes() - set(shapes) if s.lower() not in preset_names())
        if unknown:
            raise ConfigError(f"study {spec.name}: unknown model size {unknown[0]!r}: the sizes are the presets "
                              f"({', '.join(preset_names())}) and the imported models ({', '.join(shapes) or 'none'})")
        self.vocab, self.seq_len, self.data = 0, 0, {"from": "imported models' own data"}
        self.size_data: dict[str, dict] = {}  # a size given its own data.path (size_overrides) -> that data's shape
        if scratch := spec.trained_sizes() - set(shapes):  # imported sizes bring their own vocabulary and windows
            # on a preset a run trains (each run's config sets its size's): the config's own may train none
            data = deep_merge(base, {"train": {"steps": spec.budget}, "model": {"preset": min(scratch)}})
            cfg = validate(PretrainConfig, data, where=spec.pretrain,
                           overrides=study_overrides(spec, None, False, data))
            self.data = _data_shape(spec, cfg)
            self.vocab, self.seq_len = self.data["vocab_size"], self.data["seq_len"]
        own = {size: self.run_config(size, spec.budget) for size in sorted(scratch)}  # each size's, validated once
        for size, size_cfg in own.items():
            # not prepared yet: planned as the study's data (its run, and the plan of prepared data, refuse it)
            if size_cfg.data.path != cfg.data.path and (shape := _prepared_shape(size_cfg)) is not None:
                self.size_data[size] = shape
        self.model_cfgs = {size: self._scratch_model(size, own[size]) if size in own else model_config(shapes[size])
                           for size in spec.trained_sizes()}
        self.wanted: dict[str, PretrainRun] = {}
        self.full: dict[tuple[str, str], str] = {}  # (size, objective) -> the full-budget model

    def _scratch_model(self, size: str, cfg: PretrainConfig):
        """The model a size's runs train from scratch: its preset with its data's vocabulary and the model settings
        the study gives it (`cfg`: the pretraining config's, size_overrides'), as the trainer builds it."""
        settings = {k: v for k, v in (cfg.model.model_extra or {}).items()
                    if not k.endswith("_token_id")}  # ids count no FLOP; the plan checks them on the data
        return preset(size, **{"vocab_size": self.data_of(size)["vocab_size"], **settings})

    def check_positions(self, runs: dict[str, PretrainRun], configs: dict[str, PretrainConfig]) -> None:
        """A size trained from scratch whose positions stop before its data's windows, refused as its run would be
        at its start (pretraining/setup.py `check_compatible`), blamed where `max_position_embeddings` was set."""
        from encoderlab.pretraining.setup import positions_short

        for name, run in runs.items():
            positions, window = self.model_cfgs[run.size].max_position_embeddings, self.window(run.size)
            if run.size not in self.shapes and window > positions:
                raise ConfigError(f"{blamed_field(configs[name], 'model.max_position_embeddings')}"
                                  f"{positions_short(window, positions)}")

    def data_of(self, size: str) -> dict:
        """The shape of the data a size trains on: its own (`size_overrides`' data.path) or the study's."""
        return self.size_data.get(size, self.data)

    def window(self, size: str) -> int:
        return self.spec.imported[size].seq_len if size in self.shapes else self.data_of(size)["seq_len"]

    def run_config(self, size: str, steps: int, cpt: bool = False) -> PretrainConfig:
        """A run's validated schedule, batch (for its decay start and tokens per step) and model settings, these
        checked on the size's own preset as its runs take it (`Plan.config`), not on the pretraining config's."""
        own = {} if size in self.shapes else {"model": {"preset": size}}
        data = deep_merge(shared_config(self.spec, self.base, size, cpt), {"train": {"steps": steps}, **own})
        return validate(PretrainConfig, data, overrides=study_overrides(self.spec, size, cpt, data),
                        where=f"study {self.spec.name}: pretraining config of {size}{' CPT' if cpt else ''}")

    def add(self, name: str, size: str, kind: str, schedule: list[tuple[str, int]], steps: int,
            init: str | None = None, imported: str | None = None) -> str:
        for obj, _ in schedule:
            try:
                objectives.parse_phase_objective(obj)
            except Exception as exc:
                raise ConfigError(f"study {self.spec.name}: objective {obj!r}: {exc}") from None
        if is_encoder(self.shapes.get(size)) and imported is None:
            raise ConfigError(f"study {self.spec.name}: {size} is a transformers encoder: it is continued "
                              f"(cpt: sources [imported]) and evaluated as it is; a model trained from scratch "
                              f"is one of encoderlab's presets (e.g. a size_overrides shape of its size)")
        cfg = self.run_config(size, steps, cpt=kind == "cpt")
        for other in self.wanted.values():
            if (other.size, other.init, other.imported, other.schedule, other.steps) == \
                    (size, init, imported, schedule, steps):
                return other.name
        window = self.window(size)
        self.wanted[name] = PretrainRun(name, size, kind, schedule, steps, stable_end(cfg, steps), init=init,
                                imported=imported, tokens_per_step=cfg.train.sequences_per_step(window) * window)
        return name

    def add_models(self) -> None:
        spec = self.spec
        for group in spec.models:
            for size in group.sizes:
                for obj in group.objectives:
                    self.full[(size, obj)] = self.add(f"{size}-{obj}-{steps_label(spec.budget)}", size, "model",
                                                      [(obj, 0)], spec.budget)

    def add_splits(self) -> None:
        for sp in self.spec.splits:
            for size in sp.sizes:
                for budget, switches in sp.switches().items():
                    if switches is None:
                        span = stable_end(self.run_config(size, budget), budget) if sp.share_of == "stable" \
                            else budget
                        arms = [(share, round(share / 100 * span)) for share in sp.shares or []]
                    else:  # named steps: the share is what they make of the budget
                        arms = [(round(100 * step / budget, 1), step) for step in switches]
                    for share, switch in arms:
                        self._add_split(sp.first, sp.then, size, budget, share, switch)

    def _add_split(self, first: str, then: str, size: str, budget: int, share: float, switch: int) -> None:
        if share <= 0 or switch <= 0:
            sched, label = [(then, 0)], f"{size}-{then}-{steps_label(budget)}"
        elif share >= 100 or switch >= budget:  # 100%: the first objective decays too
            sched, label = [(first, 0)], f"{size}-{first}-{steps_label(budget)}"
        else:
            sched = [(first, 0), (then, switch)]
            label = f"{size}-{first}-{steps_label(switch)}-{then}-{steps_label(budget)}"
        name = self.add(label, size, "model" if len(sched) == 1 else "split", sched, budget)
        self.wanted[name].split_shares[f"{first}-{then}"] = float(share)
        if budget == self.spec.budget and len(sched) == 1:
            self.full.setdefault((size, sched[0][0]), name)

    def add_cpt(self) -> None:
        spec, cpt = self.spec, self.spec.cpt
        if cpt is None:
            return
        for size in cpt.sizes:
            for src in cpt.sources:
                if src == "imported":  # the spec checked that the size names an imported model
                    for steps in cpt.steps:
                        self.add(f"{size}-imported-{cpt.objective}-{steps_label(steps)}", size, "cpt",
                                 [(cpt.objective, 0)], steps, imported=size)
                    continue
                source = self.full.get((size, src)) or self.add(f"{size}-{src}-{steps_label(spec.budget)}", size,
                                                                "model", [(src, 0)], spec.budget)
                self.full[(size, src)] = source
                for steps in cpt.steps:
                    self.add(f"{size}-{src}-dec{steps_label(spec.budget)}-{cpt.objective}-"
                             f"{steps_label(spec.budget + steps)}", size, "cpt", [(cpt.objective, 0)], steps,
                             init=source)


def model_config(shape: dict):
    """An imported size's config: encoderlab's backbone, or a transformers encoder (`imported.ENCODER`)."""
    from encoderlab.model.transformers_body import TransformersConfig, count_parameters
    from encoderlab.study.imported import ENCODER

    if ENCODER in shape:
        return TransformersConfig(config=shape[ENCODER], parameters=count_parameters(shape[ENCODER]))
    return ModelConfig(**shape)


def is_encoder(shape: dict | None) -> bool:
    from encoderlab.study.imported import ENCODER

    return shape is not None and ENCODER in shape


def shared_config(spec: StudySpec, base: dict, size: str, cpt: bool) -> dict:
    """What every run of a size shares: the base recipe, that size's overrides, and CPT's own LR schedule."""
    data = deep_merge(base, spec.size_overrides.get(size, {}))
    return deep_merge(data, _cpt_keys(spec)) if cpt and spec.cpt else data


def _cpt_keys(spec: StudySpec) -> dict:
    return {"lr_schedule": spec.cpt.lr_schedule, "optim": spec.cpt.optim}


class StudySet(str):
    """A key of a run's pretraining config that the study file set, as `validate` takes an override ("key=value"),
    with `source`, how a refusal names it (the study file and its section: `studies/s.yaml: size_overrides.micro`):
    a bad value is blamed there, not on the pretraining config file the study names. Made by `_set_in`; a plain str
    subclass, so that a config that holds it pickles (a study's worker processes) and copies."""

    source: str


def _set_in(file: str, section: str, key: str, value: object) -> StudySet:
    made = StudySet(f"{key}={value}")
    made.source = f"{file}: {section}"
    return made


def study_overrides(spec: StudySpec, size: str | None, cpt: bool, data: dict) -> list[str]:
    """The keys of `data` (a run's pretraining config, or the base one for `size` None) that the study file set, in
    the order they were merged (the last wins, as in `shared_config`), each as it still is in `data` (a key that the
    plan set over it is not the study's). None where the spec was not read from a file."""
    file = getattr(spec, GIVEN).where
    sections = [("pretrain_overrides", spec.pretrain_overrides)]
    if size is not None:
        sections.append((f"size_overrides.{size}", spec.size_overrides.get(size, {})))
        sections += [("cpt", _cpt_keys(spec))] if cpt and spec.cpt else []
    # A run of the full budget takes its steps from the study's `budget` (a split or an earlier checkpoint's are
    # the plan's own arithmetic on it, named by the run)
    sections.append(("budget", {"train": {"steps": spec.budget}}))
    return [_set_in(file, section, key, value) for section, keys in sections if file is not None
            for key, value in _leaves(keys) if _at(data, key) == value]


def _leaves(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Each key of a nested mapping that holds a value (not a mapping), dotted: `model.num_attention_heads`."""
    return [leaf for key, value in data.items() for leaf in (
        _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [(f"{prefix}{key}", value)])]


def _at(data: dict, key: str) -> object:
    for part in key.split("."):
        data = data.get(part, _ABSENT) if isinstance(data, dict) else _ABSENT
    return data


_ABSENT = object()


def stable_end(cfg: PretrainConfig, steps: int) -> int:
    sched = cfg.lr_schedule
    if sched.kind == "wsd":
        return sched.decay_start(steps) or 0
    return steps if sched.kind == "constant" else 0  # cosine: the LR depends on the budget from the first step


def data_use(data: dict, runs: list[PretrainRun]) -> dict:
    """`data` (a `_data_shape`) and, when prepared, the epochs of it that the longest of `runs` (those reading it)
    reads."""
    out = dict(data)
    longest = max((r.steps * r.tokens_per_step for r in runs), default=0)
    if out.get("train_tokens"):
        out["longest_run_tokens"] = longest
        out["epochs"] = float(f"{longest / out['train_tokens']:.3g}")  # a short run's share is not 0
    return out


def _prepared_shape(cfg: PretrainConfig) -> dict | None:
    """Vocabulary size, window length, training tokens (and token budget) of `cfg`'s data, from its meta.json;
    None when it is not prepared."""
    from encoderlab.data.loader import resolve_data

    try:
        packed = resolve_data(cfg.data.path)
        meta = json.loads((packed / "meta.json").read_text())
        return {"from": "prepared", "path": str(packed), "vocab_size": meta["tokenizer"]["vocab_size"],
                "seq_len": meta["seq_len"], "train_tokens": meta["splits"]["train"]["tokens"],
                "max_tokens": meta.get("max_tokens")}
    except Exception:
        return None


def _data_shape(spec: StudySpec, cfg: PretrainConfig) -> dict:
    """The prepared data's shape (`_prepared_shape`) when it exists, else the study's `data_shape`; `from` says
    which."""
    if (shape := _prepared_shape(cfg)) is not None:
        return shape
    if spec.data_shape is None:
        given = Path(cfg.data.path)  # `data prepare` writes OUT/packed
        how = (f"`{prepare_command('offline')}`" if cfg.data.path == "offline" else
               f"`{prepare_command('SRC', given.parent if given.name == 'packed' else given)}`")
        raise ConfigError(f"{blamed_field(cfg, 'data.path')}the data {cfg.data.path!r} is not prepared and the "
                          "study gives no data_shape (vocab_size, seq_len) to plan with: prepare it "
                          f"({how}) or add data_shape")
    return {"from": "data_shape", "path": cfg.data.path, "vocab_size": spec.data_shape.vocab_size,
            "seq_len": spec.data_shape.seq_len}
