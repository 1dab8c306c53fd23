"""Expand a study into a graph of pretraining runs that share their stable-LR prefixes, plus evaluations.

Every model of the study is one run folder. Under WSD the state after s steps does not depend on the budget as long
as s is before the decay, so a model whose objective schedule agrees with an earlier-planned one on its first s
stable steps starts from that run's checkpoint at s (`init.branch_from`) and trains only the rest: budgets and
CLM/MLM splits become branches off common trunks, as the paper trained them. Models are placed longest first and
each takes the placed run it shares the longest prefix with, which makes the steps trained the size of the union
of all schedules' prefixes (a trie), the least any plan can train.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from encoderlab.core.config import ConfigError, blamed_field, deep_merge, load_yaml, validate
from encoderlab.model.config import ModelConfig
from encoderlab.pretraining import objectives
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.runs.checkpoint import checkpoint_name
from encoderlab.study import imported as imp
from encoderlab.study import migrate_plan
from encoderlab.study.comparisons import check_comparisons
from encoderlab.study.existing import locate
from encoderlab.study.grid import Grid, PretrainRun, data_use, is_encoder, shared_config, study_overrides
from encoderlab.study.spec import StudySpec, resolve_path

# Dense bf16 matrix-product peaks (vendor datasheets, TFLOP/s, without sparsity) for --gpu estimates.
GPU_PEAK_TFLOPS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0, "mi250x": 383.0,
                   "mi300x": 1307.0, "rtx4090": 165.0}


@dataclass
class Evaluation:
    """A checkpoint to fine-tune on tasks: a model's final state, an intermediate one, or random weights."""

    label: str
    model: str  # the model it belongs to (for intermediates: whose schedule)
    step: int
    kind: str  # "final", "intermediate", "random", "imported" or "checkpoint" (an existing model)
    run: str | None  # the run folder that writes the checkpoint (None: random init, imported, existing)
    size: str
    tasks: list[str]
    path: Path | None = None  # an existing model's checkpoint (study/existing.py)


@dataclass
class Plan:
    spec: StudySpec
    root: Path  # the study folder
    runs: dict[str, PretrainRun]
    evaluations: list[Evaluation]
    base_config: dict
    seq_len: int
    eval_runs: int  # fine-tuning runs (checkpoints x tasks x LRs x seeds)
    shapes: dict[str, dict] = field(default_factory=dict)  # imported name -> its ModelConfig fields
    baseline_runs: int = 0  # of eval_runs, those on random-init baselines (an extra to a paper's grid)
    data: dict = field(default_factory=dict)  # what the shapes were planned from (grid._data_shape)
    size_data: dict[str, dict] = field(default_factory=dict)  # a size's own data, when it has one (Grid.size_data)
    configs: dict[str, PretrainConfig] = field(default_factory=dict)  # each run's, validated when planned
    protocol: Any = None  # the evaluation protocol (finetuning/protocol.py Protocol), validated when planned

    def config(self, run: PretrainRun) -> dict:
        """The pretraining config of a run, as `encoderlab pretrain` takes it."""
        own: dict = {"model": {"preset": run.size}}
        shared = shared_config(self.spec, self.base_config, run.size, run.kind == "cpt")
        if is_encoder(self.shapes.get(run.size)):  # the architecture is the encoder's config.json
            own = {"data": {"path": str(imp.data_dir(self.root, run.size))}}
            shared = {k: v for k, v in shared.items() if k != "model"}
        elif run.size in self.shapes:  # every field given, so the preset only fills what nothing else would
            own = {"model": {"preset": "tiny", **self.shapes[run.size]},
                   "data": {"path": str(imp.data_dir(self.root, run.size))}}
        data = deep_merge(shared, {
            "name": run.name, "out_dir": str(self.root / "pretrain"), **own,
            "objective": run.objective, "train": {"steps": run.steps, "save_at": sorted(run.save_at)}})
        init = {}
        if run.parent:
            init["branch_from"] = str(self.checkpoint(run.parent, run.branch_step))
        elif run.init:
            init["from_weights"] = str(self.checkpoint(run.init, self.runs[run.init].steps))
        elif run.imported:
            init["from_weights"] = str(imp.checkpoint_dir(self.root, run.imported))
        data["init"] = init
        return data

    def run_dir(self, name: str) -> Path:
        return self.root / "pretrain" / name

    def checkpoint(self, run: str, step: int) -> Path:
        return self.run_dir(run) / "checkpoints" / checkpoint_name(step)

    def eval_checkpoint(self, e: Evaluation) -> Path:
        """Where an evaluation's checkpoint is: a run's, an import, or the random-init one the runner writes."""
        if e.path is not None:
            return e.path
        if e.run:
            return self.checkpoint(e.run, e.step)
        if e.kind == "imported":
            return imp.checkpoint_dir(self.root, e.size)
        return self.root / "random-init" / e.size / "checkpoints" / checkpoint_name(0)

    def order(self) -> list[PretrainRun]:
        """Runs in an order where every run comes after the runs it starts from."""
        done: list[PretrainRun] = []
        seen: set[str] = set()

        def visit(r: PretrainRun) -> None:
            if r.name in seen:
                return
            for dep in filter(None, (r.parent, r.init)):
                visit(self.runs[dep])
            seen.add(r.name)
            done.append(r)

        for r in self.runs.values():
            visit(r)
        return done

    def record(self, base_dir: Path) -> dict:
        """What the report needs, written to the study folder as plan.json: it reads nothing else but records."""
        from encoderlab.finetuning.records import checkpoint_tag

        protocol = self.protocol
        paper = None
        if self.spec.paper_results:
            paper = read_named(self.spec, base_dir, "paper_results")
        evaluations = []
        for e in self.evaluations:
            ckpt = self.eval_checkpoint(e)
            evaluations.append({"label": e.label, "model": e.model, "step": e.step, "kind": e.kind, "size": e.size,
                                "checkpoint": str(ckpt), "tag": checkpoint_tag(ckpt), "tasks": e.tasks})
        runs = [{"name": r.name, "size": r.size, "kind": r.kind, "objective": r.objective,
                 "schedule": [list(x) for x in r.schedule], "steps": r.steps, "init": r.init,
                 "imported": r.imported, "parent": r.parent,
                 "branch_step": r.branch_step, "tokens_per_step": r.tokens_per_step, "flops": r.naive_flops,
                 "split_shares": r.split_shares}
                for r in self.order()]
        return {"format_version": migrate_plan.FORMAT, "study": self.spec.name,
                "spec": self.spec.model_dump(mode="json"), "budget": self.spec.budget,
                "protocol": protocol.model_dump(mode="json"), "runs": runs, "evaluations": evaluations,
                "paper_results": paper, "summary": self.summary()}

    def summary(self, gpu: str | None = None, mfu: float = 0.4) -> dict:
        trained = sum(r.steps - r.branch_step for r in self.runs.values())
        naive = sum(r.steps for r in self.runs.values())
        flops = sum(r.flops for r in self.runs.values())
        naive_flops = sum(r.naive_flops for r in self.runs.values())
        out = {
            "study": self.spec.name, "folder": str(self.root), "models": len(self.runs),
            "evaluated_checkpoints": len(self.evaluations), "finetuning_runs": self.eval_runs,
            "baseline_finetuning_runs": self.baseline_runs,
            "steps": trained, "naive_steps": naive,
            "tokens": sum((r.steps - r.branch_step) * r.tokens_per_step for r in self.runs.values()),
            "naive_tokens": sum(r.steps * r.tokens_per_step for r in self.runs.values()),
            "flops": flops, "naive_flops": naive_flops,
            "saving": round(1 - flops / naive_flops, 4) if naive_flops else 0.0,
            "data": data_use(self.data, [r for r in self.runs.values()
                                         if not r.imported and r.size not in self.size_data]),
            "size_data": {size: data_use(d, [r for r in self.runs.values() if r.size == size])
                          for size, d in self.size_data.items()},
            "runs": [{"name": r.name, "size": r.size, "objective": r.objective, "steps": r.steps,
                      "from": (f"{r.parent}@{r.branch_step}" if r.parent else
                               f"{r.init} (weights)" if r.init else
                               f"imported {r.imported} (weights)" if r.imported else "scratch"),
                      "trains": r.steps - r.branch_step, "flops": r.flops,
                      "checkpoints": sorted(r.save_at)} for r in self.order()],
            "evaluations": [{"label": e.label, "kind": e.kind, "tasks": len(e.tasks),
                             "checkpoint": str(self.eval_checkpoint(e))}
                            for e in self.evaluations],
            "imports": [{"name": name, "source": entry.source, "checkpoint": str(imp.checkpoint_dir(self.root, name)),
                         "data": str(imp.data_dir(self.root, name)), "seq_len": entry.seq_len,
                         "done": imp.is_imported(self.root, name)} for name, entry in self.spec.imported.items()],
        }
        if self.spec.evaluation.mteb:  # study/jobs.py mteb_jobs: every model but the intermediate checkpoints
            scored = {self.eval_checkpoint(e) for e in self.evaluations if e.kind != "intermediate"}
            out["mteb"] = {"tasks": list(self.spec.evaluation.mteb), "models": len(scored)}
        if gpu:
            peak = GPU_PEAK_TFLOPS.get(gpu.lower())
            if peak is None:
                raise ConfigError(f"unknown GPU {gpu!r}: known are {', '.join(GPU_PEAK_TFLOPS)}")
            out["gpu"] = {"name": gpu, "peak_tflops": peak, "mfu": mfu,
                          "gpu_hours": flops / (peak * 1e12 * mfu) / 3600,
                          "naive_gpu_hours": naive_flops / (peak * 1e12 * mfu) / 3600}
        return out


def _shared(a: PretrainRun, b: PretrainRun) -> int:
    """Steps at the start that two runs train identically (same objective, stable LR)."""
    limit = min(a.stable_end, b.stable_end)
    for step in sorted({s for _, s in a.schedule} | {s for _, s in b.schedule}):
        if step >= limit:
            break
        if a.objective_at(step) != b.objective_at(step):
            return step
    return limit


def _flops(run: PretrainRun, start: int, cfg: ModelConfig, seq_len: int) -> float:
    total = 0.0
    bounds = [s for _, s in run.schedule] + [run.steps]
    for (obj, a), b in zip(run.schedule, bounds[1:]):
        lo, hi = max(a, start), b
        if hi <= lo:
            continue
        o = objectives.parse_phase_objective(obj)
        # a mix draws each member with probability proportional to its weight (objectives.Mix.pick): its expected cost
        members = list(o.parts) if isinstance(o, objectives.Mix) else [(o, 1.0)]
        per_token = sum(w * cfg.flops_per_token(seq_len, causal=isinstance(m, objectives.CLM),
                                                head_fraction=getattr(m, "mask_rate", 1.0))
                        for m, w in members) / sum(w for _, w in members)
        total += (hi - lo) * run.tokens_per_step * per_token
    return total


def build_plan(spec: StudySpec, base_dir: Path) -> Plan:
    base = {}  # a study of existing checkpoints alone trains nothing: no base config
    if spec.pretrain is not None:
        base = deep_merge(read_named(spec, base_dir, "pretrain"), spec.pretrain_overrides)
    root = resolve_path(Path.cwd(), spec.out_dir) / spec.name
    existing = locate(spec, base_dir, root)  # a wrong path is refused before anything else is looked at
    grid = Grid(spec, base, {name: imp.architecture(spec, base_dir, root, name) for name in spec.imported})
    grid.add_models()
    grid.add_splits()
    grid.add_cpt()
    runs = _share_trunks(grid.wanted)
    for run in runs.values():
        run.flops = _flops(run, run.branch_step, grid.model_cfgs[run.size], grid.window(run.size))
        run.naive_flops = _flops(run, 0, grid.model_cfgs[run.size], grid.window(run.size))
    evaluations = _evaluations(spec, runs, grid.full) + [
        Evaluation(name, name, 0, "checkpoint", None, name, spec.evaluation.tasks, path)
        for name, path in existing.items()]
    _check_labels(spec, evaluations)
    plan = Plan(spec, root, runs, evaluations, base, grid.seq_len, 0, grid.shapes, data=grid.data,
                size_data=grid.size_data)
    check_comparisons(plan)  # a model name the study does not evaluate is refused before anything runs
    plan.configs = {name: _run_config(plan, grid, run) for name, run in runs.items()}  # valid before anything runs
    grid.check_positions(runs, plan.configs)
    _check_published(spec, base_dir, evaluations)
    plan.protocol = protocol = load_protocol(spec, base_dir)
    plan.eval_runs = finetuning_runs(evaluations, protocol)
    plan.baseline_runs = finetuning_runs([e for e in evaluations if e.kind == "random"], protocol)
    return plan


def _run_config(plan: Plan, grid: Grid, run: PretrainRun) -> PretrainConfig:
    """A run's pretraining config, validated; a key the study file set is blamed there (`study_overrides`)."""
    data = plan.config(run)
    cfg = validate(PretrainConfig, data, where=f"study {plan.spec.name}, run {run.name}",
                   overrides=study_overrides(plan.spec, run.size, run.kind == "cpt", data))
    data_shape = grid.data_of(run.size)  # a size's own data (size_overrides' data.path), or the study's
    vocab = data_shape.get("vocab_size")
    own = getattr(cfg.model, "vocab_size", None)  # an imported size brings its own data
    if vocab and own is not None and own < vocab and run.size not in plan.shapes:
        # the run would fail once it reads the data, and a random-init evaluation index past its embeddings
        raise ConfigError(f"{blamed_field(cfg, 'model.vocab_size')}{own} is fewer than the data's {vocab} tokens "
                          f"({data_shape.get('path')}): drop model.vocab_size (the preset takes the data's) or use "
                          f"at least {vocab}")
    if data_shape.get("from") == "prepared" and run.size not in plan.shapes:
        from encoderlab.pretraining.setup import model_config, run_data
        packed = run_data(cfg)  # a size's own data.path (size_overrides): refused now, not when its run starts
        # the run's own check of its model settings against the data's tokenizer (a token id past the vocabulary)
        model_config(cfg, json.loads((packed / "meta.json").read_text())["tokenizer"])
    return cfg


def _check_labels(spec: StudySpec, evaluations: list[Evaluation]) -> None:
    """Two evaluations under one label, or whose records would share one folder, would mix their records."""
    from encoderlab.finetuning.records import checkpoint_tag

    seen: dict[str, str] = {}
    for e in evaluations:
        for key in (f"label {e.label}", f"records folder {checkpoint_tag(e.path)}" if e.path else ""):
            if key and key in seen:
                raise ConfigError(f"study {spec.name}: checkpoints.{e.label} has the {key} of {seen[key]}: give "
                                  "it another name, or a checkpoint under another run folder name")
            seen[key] = e.label


def _check_published(spec: StudySpec, base_dir: Path, evaluations: list[Evaluation]) -> None:
    """A published number keyed by a name the study does not have would print as '-' beside the model it meant."""
    if spec.paper_results:
        published = read_named(spec, base_dir, "paper_results").get("categories") or {}
        labels = sorted(e.label for e in evaluations)
        unknown = sorted(set(published) - set(labels))
        if unknown:
            more = ", ..." if len(labels) > 6 else ""
            raise ConfigError(f"paper_results {spec.paper_results}: {', '.join(unknown[:3])} name no evaluated "
                              f"model of study {spec.name} (allowed: {', '.join(labels[:6])}{more})")


def finetuning_runs(evaluations: list[Evaluation], protocol) -> int:
    """The fine-tuning runs of a plan: one per (checkpoint, task, LR, seed). The one place that counts them, so a
    protocol that trains one model for several tasks (retrieval: one MS MARCO model scored on every IR set) changes
    the count here."""
    return sum(_task_count(e.tasks, protocol) for e in evaluations) * len(protocol.lrs) * len(protocol.seeds)


def _share_trunks(wanted: dict[str, PretrainRun]) -> dict[str, PretrainRun]:
    placed: dict[str, PretrainRun] = {}
    def key(r: PretrainRun) -> tuple:  # models before CPT arms, longest first
        return (r.init is not None or r.imported is not None, -r.steps, r.kind != "model", r.name)

    for run in sorted(wanted.values(), key=key):
        best, best_shared = None, 0
        for other in placed.values():
            if other.group() == run.group():
                shared = _shared(run, other)
                if shared > best_shared:
                    best, best_shared = other, shared
        if best is not None:
            owner = best
            while owner.parent and owner.branch_step >= best_shared:  # the run that trains step best_shared
                owner = placed[owner.parent]
            run.parent, run.branch_step = owner.name, best_shared
            owner.save_at.add(best_shared)
        placed[run.name] = run
    return {name: placed[name] for name in wanted}


def _owner(runs: dict[str, PretrainRun], name: str, step: int) -> str:
    run = runs[name]
    while run.parent and step <= run.branch_step:
        run = runs[run.parent]
    return run.name


def _evaluations(spec: StudySpec, runs: dict[str, PretrainRun], full: dict[tuple[str, str], str]) -> list[Evaluation]:
    ev = spec.evaluation
    inter_tasks = ev.intermediate_tasks or ev.tasks
    out = [Evaluation(r.name, r.name, r.steps, "final", r.name, r.size, ev.tasks) for r in runs.values()]
    inter = spec.intermediate
    for (size, obj), name in full.items():
        if inter is None or (inter.sizes is not None and size not in inter.sizes) or (
                inter.objectives is not None and obj not in inter.objectives):
            continue
        _refuse_decayed(spec, runs[name], inter.steps)
        for step in sorted(inter.steps):
            if step >= runs[name].steps:
                continue
            owner = _owner(runs, name, step)
            runs[owner].save_at.add(step)
            # the released names: 610m-clm-42k-10000 is 610m-clm-42k's (undecayed) state at step 10,000
            out.append(Evaluation(f"{name}-{step}", name, step, "intermediate", owner, size, inter_tasks))
    random_tasks = ev.random_init_tasks or inter_tasks
    out += [Evaluation(f"{size}-random", f"{size}-random", 0, "random", None, size, random_tasks)
            for size in spec.random_init]
    out += [Evaluation(f"{name}-imported", f"{name}-imported", 0, "imported", None, name, ev.tasks)
            for name in spec.imported]
    return out


def _refuse_decayed(spec: StudySpec, run: PretrainRun, steps: list[int]) -> None:
    """An intermediate checkpoint is the run's undecayed state (the report and the paper's data-efficiency finding read
    it so): a step inside the LR decay would be a half-decayed model under that name."""
    decayed = sorted(s for s in steps if 0 < run.stable_end < s < run.steps)
    if decayed:
        raise ConfigError(f"study {spec.name}: intermediate.steps {decayed} fall inside {run.name}'s LR decay (steps "
                          f"{run.stable_end}-{run.steps}): an intermediate checkpoint is a stable-phase (undecayed) "
                          f"state; give steps up to {run.stable_end}, the decay start")


def expand_tasks(tasks: list[str]) -> list[str]:
    """'offline' stands for every prepared offline task."""
    from encoderlab.tasks import offline_task_names

    out: list[str] = []
    for t in tasks:
        out += offline_task_names() if t == "offline" else [t]
    return out


def _task_count(tasks: list[str], protocol) -> int:
    """Trainings per LR and seed: one per evaluation job (finetuning/shared_training.py `job_groups`)."""
    from encoderlab.finetuning.shared_training import job_groups

    return len(job_groups(expand_tasks(tasks), protocol))


def load_protocol(spec: StudySpec, base_dir: Path):
    from encoderlab.finetuning.protocol import Protocol

    path = resolve_path(base_dir, spec.evaluation.protocol)
    return validate(Protocol, read_named(spec, base_dir, "evaluation.protocol", spec.evaluation.protocol),
                    where=str(path))


# The folder of the shipped configs that each file a study names is one of: a study file copied out of configs/
# alone names `../pretrain/...` that is not beside it, and the refusal points to the shipped one.
SHIPPED_KINDS = {"pretrain": "pretrain", "evaluation.protocol": "eval", "paper_results": "studies"}


def read_named(spec: StudySpec, base_dir: Path, key: str, value: str | None = None) -> dict:
    """The YAML file the study's `key` names (relative to the study file's folder); one that cannot be read is
    refused naming the study and the key as well as the file."""
    try:
        return load_yaml(resolve_path(base_dir, value if value is not None else getattr(spec, key)),
                         shipped=SHIPPED_KINDS.get(key))
    except ConfigError as e:
        raise ConfigError(f"study {spec.name}: {key}: {e}") from None
