"""Resume means the same run: what a resumed run's config is compared with, what may change, and extending a run.

A run folder keeps the config it was started with (`config.yaml`, never replaced) and one file per accepted
extension (`config.extend-NNNNNNN.yaml`, the step it was extended at); the newest of them is the run's definition.
`--resume` refuses any other difference than the FREE keys below; `--extend` also lets the budget, the LR schedule
and the objective schedule change, as long as every step already trained (and the LR of the next one) stays
exactly what it was.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import yaml

from encoderlab.core.config import read_yaml
from encoderlab.core.errors import EncoderlabError, option
from encoderlab.core.io import atomic_file
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.objectives import phase_at
from encoderlab.runs import checkpoint, migrate_checkpoint

CONFIG = "config.yaml"


def has_run(run_dir: Path) -> bool:
    """Whether a run was started in `run_dir` (it may have no checkpoint yet, or have lost its LATEST)."""
    return any((run_dir / name).exists() for name in (checkpoint.LATEST, CONFIG, "metrics.jsonl")) or \
        checkpoint.newest_complete(run_dir) is not None

# What a run writes before its first checkpoint (and the leftovers `checkpoint.clean_stale` removes).
_UNSAVED = ("config.yaml", "metrics.jsonl", "tensorboard", "summary.json", "checkpoints")


def clear_unsaved_start(run_dir: Path) -> list[str]:
    """A run that failed or was killed before its first checkpoint (out of memory at step 1, a kill at step 900 of
    a run saving at 1,000) has nothing to resume from: a new start under its name would train it again from
    scratch anyway, so its config and log are removed rather than blocking the name. Never touches a run with a
    checkpoint, a LATEST (even a dangling one: checkpoints removed by hand are not 'none saved') or an extension.
    Call with the run's lock held; returns the names removed."""
    if not run_dir.is_dir() or (run_dir / checkpoint.LATEST).exists() or any(run_dir.glob("config.extend-*.yaml")) \
            or checkpoint.newest_complete(run_dir) is not None:
        return []
    removed = [run_dir / name for name in _UNSAVED if (run_dir / name).exists()]
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return [p.name for p in removed]


# Keys that may differ on --resume. Where the run lies (a moved run folder is the same run; the data is compared by
# content, through the fingerprint its checkpoints record), what is logged and kept, when a diverging run stops,
# and how the same computation is executed (processes, device, threads, micro-batches, compile, attention kernel):
# the updates are the same in exact arithmetic, and only unchanged settings give a bitwise-equal continuation
# (floating-point sums in another order; on another kind of device the MLM masks come from that device's generator:
# equally random, not the same). Everything else changes what the run is or what its numbers mean: objective, seeds,
# data, model, optimizer, LR schedule, steps, batch, dtype (bf16 autocast or fp32 numerics), eval_batches (the
# held-out set of its losses).
FREE = frozenset({
    "name", "out_dir", "data.path", "train.log_every", "train.eval_every", "train.tensorboard", "train.wandb",
    "train.wandb.project", "train.wandb.name", "train.wandb.mode", "train.save_every",
    "train.save_at", "train.keep_checkpoints", "train.loss_spike", "train.threads", "train.device", "train.parallel",
    "train.micro_batch", "train.compile", "train.activation_checkpointing", "train.attention"})
# What --extend may change besides: the budget and the schedules over it (checked against the steps trained).
EXTENDABLE = ("train.steps", "objective", "lr_schedule.")


def saved_config(run_dir: Path) -> tuple[Path, PretrainConfig] | None:
    """The run's definition: its newest extension file, else config.yaml; None when it has neither."""
    extensions = sorted(run_dir.glob("config.extend-*.yaml"))
    file = extensions[-1] if extensions else run_dir / CONFIG
    if not file.exists():
        return None
    try:
        return file, PretrainConfig.model_validate(migrate_checkpoint.run_config(read_yaml(file.read_text())))
    except (OSError, ValueError, yaml.YAMLError):  # pydantic's ValidationError is a ValueError
        raise EncoderlabError(f"{file} is damaged or not a pretraining config, so this run cannot be compared with "
                              "the one it continues: restore the file, or start a new run "
                              f"({option('set', 'name=...')})") from None


def check_same_run(cfg: PretrainConfig, state: dict | None, data_fingerprint: str, extend: bool,
                   where: Path | None = None, adopt: bool = False) -> bool:
    """Refuse, in one line listing each key (old -> new), a config that would continue `cfg.run_dir` as another
    run; returns whether this is an extension to record (`record_config`). Without the run's config files, the
    config its checkpoint (`where`, whose `state`: runs/migrate_checkpoint.py's current format) recorded is the
    run's; a checkpoint too old to hold one is refused unless `adopt`."""
    run_dir, found = cfg.run_dir, saved_config(cfg.run_dir)
    if found is None and state is not None and state["config"] is not None:
        found = (Path(where or "") / "state.json", PretrainConfig.model_validate(state["config"]))
    new = _flat(cfg.model_dump(mode="json"))
    old = _flat(found[1].model_dump(mode="json")) if found else {}
    if state is not None and not found:  # a run from before config history: its checkpoint says what it was
        _check_adopted(run_dir, where, adopt)
        recorded = {"objective": state["schedule"], "train.steps": state["total_steps"]}
        old = {k: v for k, v in recorded.items() if v is not None}
    keys = old.keys() | new.keys() if found else old.keys()  # a key set only now (a model field) is a change too
    changed = _changed(old, new, keys)
    if state is not None and state["data_fingerprint"] not in (None, data_fingerprint):
        changed.insert(0, "data.path")
    extending = [k for k in changed if k.startswith(EXTENDABLE)]
    if changed and not (extend and extending == changed):
        longer = new["train.steps"] > (old.get("train.steps") or new["train.steps"])
        hint = ("; to train it further, pass --extend" if extending == changed and longer and not extend else
                f"; continue it with its own settings ({found[0] if found else 'its checkpoint'}), or start a new "
                f"run ({option('set', 'name=...')})")
        diffs = _describe_changes(old, new, changed).replace(
            "data.path: ", "data.path (other content than the run trained on): ")
        raise EncoderlabError(f"cannot resume {run_dir} with a different configuration: {diffs}{hint}")
    if state is not None:
        _check_past(cfg, state, found[1] if found and changed else None)
    return bool(changed)


def _check_adopted(run_dir: Path, where: Path | None, adopt: bool) -> None:
    """Its config.yaml lost, a run whose checkpoint holds no config could go on with another LR, seed or model,
    unseen: only the objective and the steps are recorded there. Continuing it takes this config as its own."""
    if not adopt:
        raise EncoderlabError(f"cannot resume {run_dir}: its {CONFIG} is missing and its checkpoint "
                              f"({where}) was written before checkpoints recorded their "
                              f"config, so a changed setting (LR, seed, model) could not be seen; restore {CONFIG}, "
                              "or pass --adopt-config to continue it with this config as its own")


# What an untrained model's weights are made from (setup.initial_model): its shape and the seed. The data's tokenizer
# fills the vocabulary, and a data.path that moved is FREE for runs too.
INITIAL_WEIGHTS = ("model.", "train.seed", "init.")


def changes_from_saved(cfg: PretrainConfig, only: tuple[str, ...] | None = None) -> str:
    """How `cfg` differs from the config saved in its run folder, `key: old -> new, ...` (the FREE keys left out, and
    with `only`, every key that starts with none of its prefixes); '' when it does not, or when the folder holds no
    config."""
    found = saved_config(cfg.run_dir)
    if found is None:
        return ""
    old, new = _flat(found[1].model_dump(mode="json")), _flat(cfg.model_dump(mode="json"))
    keys = {k for k in old.keys() | new.keys() if only is None or k.startswith(only)}
    return _describe_changes(old, new, _changed(old, new, keys))


def _changed(old: dict, new: dict, keys) -> list[str]:
    return [k for k in sorted(keys) if old.get(k) != new.get(k) and k not in FREE]


def _describe_changes(old: dict, new: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" + (DTYPE_HINT if k == "train.dtype" else "")
                     for k in keys)


DTYPE_HINT = " (`auto` takes bf16 only where the device multiplies bf16 natively; name the run's dtype to continue it)"


def _check_past(cfg: PretrainConfig, state: dict, before: PretrainConfig | None) -> None:
    """The LR of the next step must be the one the checkpoint was saved with, and, for an extension (`before`: the
    run's definition), every step trained must keep its LR and objective: otherwise the run would not continue."""
    # A checkpoint that did not record its LR (None) compares as continuous: nothing to check it against.
    step, lr = state["step"], cfg.lr_schedule
    saved_lr = math.nan if state["lr_factor"] is None else state["lr_factor"]
    first = None if not abs(lr.factor(step, cfg.train.steps) - saved_lr) > 1e-9 else (
        step, saved_lr, lr.factor(step, cfg.train.steps), "LR")
    if before is not None and first is None:
        total, old_lr = before.train.steps, before.lr_schedule
        if cfg.train.steps < total:
            raise EncoderlabError(f"cannot extend {cfg.run_dir} to train.steps={cfg.train.steps}: it is already "
                                  f"planned for {total}; --extend adds steps")
        old_phases, new_phases = before.phases, cfg.phases
        for s in range(step + 1):
            was, now = old_lr.factor(s, total), lr.factor(s, cfg.train.steps)
            if abs(was - now) > 1e-9:
                first = (s, was, now, "LR")
                break
            was, now = (phase_at(p, min(s, total - 1)).objective.name for p in (old_phases, new_phases))
            if s < step and was != now:
                first = (s, was, now, "objective")
                break
    if first is not None:
        s, was, now, what = first
        shown = (f"the run's LR was {was:.3g} x peak, this config gives {now:.3g} x peak" if what == "LR" else
                 f"the run trained {was}, this config trains {now}")
        raise EncoderlabError(f"cannot {'extend' if before else 'resume'} {cfg.run_dir} at step {step}: at step {s} "
                              f"{shown}, so it would not continue the same run; "
                              f"{_branch_hint(cfg.run_dir)}")


def _branch_hint(run_dir: Path) -> str:
    stable = [p for p in sorted((run_dir / "checkpoints").glob("step-*")) if checkpoint._reason(p) == "stable"]
    where = f"its stable checkpoint {stable[-1]}" if stable else "a checkpoint of it taken before its LR decayed"
    return (f"branch a new run from {where} with {option('set', 'init.branch_from=PATH', 'name=NEW_NAME')} and a "
            "schedule whose decay starts later")


def record_config(cfg: PretrainConfig, extended_at: int | None) -> None:
    """Write config.yaml for a new run, or the extension file of an extension accepted at step `extended_at`; the
    run's config.yaml is never replaced (a resume with FREE keys changed records nothing)."""
    name = CONFIG if extended_at is None else f"config.extend-{extended_at:07d}.yaml"
    if extended_at is None and (cfg.run_dir / CONFIG).exists():
        return
    with atomic_file(cfg.run_dir / name) as tmp:
        tmp.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_continues(cfg: PretrainConfig, state: dict, path: Path, why: str, global_batch: int) -> None:
    """Refuse to resume or branch (`why`) from the checkpoint `path` whose `state` another global batch trained (its
    data position would mean another thing), or, for a branch, whose LR this schedule does not give at its step."""
    if state["data"]["global_batch_size"] != global_batch:
        raise EncoderlabError(f"cannot {why} from {path}: it was trained with a global batch of "
                              f"{state['data']['global_batch_size']} sequences, this config has "
                              f"{global_batch}; the data position would not mean the same thing")
    if why == "branch":
        here = cfg.lr_schedule.factor(state["step"], cfg.train.steps)
        if abs(here - state["lr_factor"]) > 1e-9:
            raise EncoderlabError(
                f"cannot branch from {path}: it was trained at {state['lr_factor']:.3g} x peak LR at step "
                f"{state['step']}, this schedule gives {here:.3g} there; branch from a checkpoint taken before "
                "the trunk's decay (its 'stable' checkpoint) into a schedule whose decay starts later")
