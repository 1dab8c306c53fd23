"""A study's jobs, one class per kind: what each runs on (validated configs, not dicts), when it is done, and how it
runs. `jobs_of` turns a plan into them; the scheduler (study/scheduler.py) orders and runs them without knowing
their kinds beyond `Job`.

Nothing is remembered but what is on disk: a pretraining run is done when its final checkpoint and summary exist
(a partial one resumes from its last checkpoint), the random-init baseline when its checkpoint is written, an
evaluation when every run of its grid is recorded by the rule a sweep uses (finetuning/records.py `recorded`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.shared_training import job_groups, trainer_spec
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.runs.checkpoint import checkpoint_name
from encoderlab.runs.encoders import encoder_digest, tokenizer_key
from encoderlab.study.plan import Plan, expand_tasks
from encoderlab.study.scheduler import Job

Say = Callable[[str], None]


@dataclass(kw_only=True)
class PretrainJob(Job):
    """One pretraining run of the plan, resumed from its last checkpoint when it has one."""
    kind = "pretrain"
    config: PretrainConfig

    @property
    def run_dir(self) -> Path:
        return Path(self.config.out_dir) / self.config.name

    @property
    def final(self) -> Path:
        return self.run_dir / "checkpoints" / checkpoint_name(self.config.train.steps)

    def is_done(self) -> bool:
        if not ((self.run_dir / "summary.json").exists() and self.final.exists()):
            return False
        try:
            self.check_final(hashes=False)  # sizes: a study's start reads no weights (every reader hashes them)
        except EncoderlabError:
            return False  # the job runs and fails saying why: never counted as done
        return True

    def check_final(self, hashes: bool = True) -> None:
        """The final checkpoint is whole (weights and state: what the evaluations read) and this run's: a damaged
        or another run's one (a copy, a swapped folder) would otherwise be counted as this model, and evaluated
        under its name."""
        import json

        from encoderlab.runs.checkpoint import WEIGHTS, verify

        final = self.final
        verify(final, names=(WEIGHTS, "state.json", "model_config.json"), hashes=hashes)
        state = json.loads((final / "state.json").read_text())
        own = (self.config.name, self.config.objective.text)
        written = (state.get("config", {}).get("name", own[0]), state.get("schedule", own[1]))
        if written != own:
            raise EncoderlabError(f"{final} was written by run {written[0]!r} ({written[1]}), not by this study's "
                                  f"{own[0]!r} ({own[1]}): move it away and run the study again")

    def execute(self, log: Say, progress: Say | None) -> dict:
        from encoderlab.pretraining.loop import Trainer

        if self.final.exists():
            self.check_final()
        started = time.perf_counter()
        result = Trainer(self.config, resume=True, log=log, show_progress=progress or False).run()
        loss = {k: round(v, 3) for k, v in result["final"].items() if k.startswith("val/")}
        return {"seconds": round(time.perf_counter() - started, 1), "loss": loss}


@dataclass(kw_only=True)
class RandomInitJob(Job):
    """A checkpoint of the untrained model of one size (the seed's initialisation): the random-init baseline. Its
    run folder's config is a run of that size's, without its `init`, in its own folder (None: no run of the size)."""
    kind = "random"
    size: str
    config: PretrainConfig | None
    checkpoint: Path

    def is_done(self) -> bool:
        return (self.checkpoint / "state.json").exists()

    def execute(self, log: Say, progress: Say | None) -> dict:
        import shutil

        from encoderlab.data.loader import PackedDataset
        from encoderlab.model import attention
        from encoderlab.pretraining.resume import record_config
        from encoderlab.pretraining.setup import initial_model, model_config, run_data
        from encoderlab.runs import checkpoint

        if self.config is None:
            raise RuntimeError(f"random-init baseline for size {self.size}: no run of that size to copy the data "
                               "and model settings from")
        run_dir = self.checkpoint.parent.parent
        if run_dir.exists():
            shutil.rmtree(run_dir)  # never finished (the checkpoint is the last thing written): start clean
        run_dir.mkdir(parents=True)
        record_config(self.config, None)  # config.yaml, as a run's: what refuse_changed compares the study file with
        data = PackedDataset(run_data(self.config), "train")
        model_cfg = model_config(self.config, data.meta["tokenizer"])
        model = initial_model(self.config, model_cfg, attention.for_inference())  # the trained runs' first weights
        checkpoint.save_weights_only(self.checkpoint, model.state_dict(), model_cfg, data.root / "tokenizer",
                                     {"reason": "random-init", "total_steps": 0})
        checkpoint.set_latest(run_dir, self.checkpoint)  # a run folder like any other: `encoderlab finetune DIR TASK`
        return {"seconds": 0.0}


_PREPARED: dict[tuple, dict] = {}  # per process, by protocol and tokenizer: tasks by spec, tokenised once


@dataclass(kw_only=True)
class EvalJob(Job):
    """One checkpoint's sweep over one task, or over the retrieval tasks that share their training."""
    kind = "eval"
    checkpoint: Path
    tasks: list[str]
    protocol: Protocol
    out: Path

    def is_done(self) -> bool:
        from encoderlab.tasks import task_family, task_identity

        try:  # the records of these weights: a checkpoint made again (other weights) has its evaluations done again
            weights = encoder_digest(self.checkpoint)
        except (OSError, EncoderlabError):
            return False  # not written yet, or damaged: the job runs, and says so if it cannot
        tag, key = records.checkpoint_tag(self.checkpoint), records.protocol_key(self.protocol.model_dump(mode="json"))
        identities = [task_identity(task) for task in self.tasks]  # data hashed once per process, not per job
        shared = trainer_spec(self.protocol, self.tasks, task_family)
        trainer = task_identity(shared)[1] if shared else None  # else each task trained on its own data
        runs = [[records.recorded(self.out, tag, key, [identity], trainer or identity[1], lr, seed, weights)
                 for lr in self.protocol.lrs for seed in self.protocol.seeds] for identity in identities]
        # Every run recorded, and each task with a run that scored: one without is a failed job (check_scored),
        # however often it runs, never "done"
        return all(all(task) and any(found[0]["status"] == "ok" for found in task) for task in runs)

    def execute(self, log: Say, progress: Say | None) -> dict:
        from encoderlab.core.io import task_cache
        from encoderlab.finetuning.aggregate import check_scored
        from encoderlab.finetuning.sweep import run_sweep

        started = time.perf_counter()
        tok = tokenizer_key(self.checkpoint)
        key = records.protocol_key(self.protocol.model_dump(mode="json"))
        summary = run_sweep(self.checkpoint, self.tasks, self.protocol, self.out, log=lambda m: None,
                            show_progress=False, cache_dir=task_cache(),
                            prepared=_PREPARED.setdefault((key, hash(tok)), {}), progress_log=progress)
        check_scored(summary)  # a task of which no run scored fails the job: its models have no score there
        entries = list(summary["tasks"].values())  # under their names (a YAML's is not its spec)
        tests = [e["test"] for e in entries if e.get("test") is not None]
        return {"seconds": round(time.perf_counter() - started, 1),
                "test": sum(tests) / len(tests) if tests else None, "failed": sum(e.get("failed", 0) for e in entries)}


@dataclass(kw_only=True)
class MtebJob(Job):
    """One checkpoint scored by the mteb library on the study's `evaluation.mteb` tasks (hub/mteb_eval.py), frozen:
    done when its folder's summary.json holds these weights'."""
    kind = "mteb"
    checkpoint: Path
    tasks: list[str]
    out: Path

    def is_done(self) -> bool:
        """Done for these weights and these tasks: a study file that names other `evaluation.mteb` tasks since has
        them scored, not the old ones' scores kept under the new list. The tasks are compared as a set: the same
        tasks in another order are the same scores."""
        import json

        try:
            weights = encoder_digest(self.checkpoint)
            summary = json.loads((self.out / "summary.json").read_text(encoding="utf-8"))
            scored = [row["task"] for row in summary["tasks"]]
            return summary.get("weights") == weights and set(scored) == set(self.tasks)
        except (OSError, ValueError, AttributeError, KeyError, TypeError, EncoderlabError):
            return False

    def execute(self, log: Say, progress: Say | None) -> dict:
        from encoderlab.hub.mteb_eval import run_mteb

        summary = run_mteb(self.checkpoint, self.tasks, self.out, force=True)
        scores = [row["score"] for row in summary["tasks"]]
        return {"seconds": summary["seconds"], "test": sum(scores) / len(scores)}


def mteb_jobs(plan: Plan) -> list[Job]:
    """An MTEB job per final model, import, existing checkpoint and random-init baseline (not intermediates), when
    the study names `evaluation.mteb` tasks: its folder is mteb/LABEL/ of the study."""
    tasks, jobs, seen = plan.spec.evaluation.mteb, [], set()
    for e in plan.evaluations if tasks else []:
        checkpoint = plan.eval_checkpoint(e)
        if e.kind == "intermediate" or checkpoint in seen:
            continue
        seen.add(checkpoint)
        deps = [f"pretrain:{e.run}" if e.run else f"random:{e.size}"] if e.kind in ("final", "random") else []
        jobs.append(MtebJob(id=f"mteb:{e.label}", deps=deps, checkpoint=checkpoint, tasks=list(tasks),
                            out=plan.root / "mteb" / e.label))
    return jobs


def jobs_of(plan: Plan) -> list[Job]:
    """Every job of the plan, each after the jobs it depends on, holding the configs and protocol the plan
    validated."""
    protocol, configs = plan.protocol, plan.configs
    jobs: list[Job] = []
    for run in plan.order():
        # A branch starts as soon as its parent has written the branch-point checkpoint, not when it finishes.
        deps = [f"pretrain:{run.parent}@{plan.checkpoint(run.parent, run.branch_step)}"] if run.parent else []
        deps += [f"pretrain:{run.init}"] if run.init else []
        jobs.append(PretrainJob(id=f"pretrain:{run.name}", deps=deps, config=configs[run.name],
                                cost=float(run.steps - run.branch_step)))
    for e in {e.size: e for e in plan.evaluations if e.kind == "random"}.values():  # one per size
        same_size = next((r for r in plan.runs.values() if r.size == e.size), None)  # its model, before any step
        checkpoint = plan.eval_checkpoint(e)
        jobs.append(RandomInitJob(id=f"random:{e.size}", size=e.size, checkpoint=checkpoint,
                                  config=_own_folder(configs[same_size.name], checkpoint) if same_size else None))
    for e in plan.evaluations:
        deps = [f"pretrain:{e.run}" if e.run else f"random:{e.size}"] if e.kind in ("final", "intermediate",
                                                                                   "random") else []
        for name, tasks in job_groups(expand_tasks(e.tasks), protocol):
            jobs.append(EvalJob(id=f"eval:{e.label}:{name}", deps=deps, checkpoint=plan.eval_checkpoint(e),
                                tasks=tasks, protocol=protocol, out=plan.root / "evals"))
    return jobs + mteb_jobs(plan)


def _own_folder(config: PretrainConfig, checkpoint: Path) -> PretrainConfig:
    """A run's config for the random-init baseline's folder (the checkpoint's run folder), without its `init`."""
    run_dir = checkpoint.parent.parent
    data = dict(config.model_dump(mode="json"), init={}, name=run_dir.name, out_dir=str(run_dir.parent))
    return PretrainConfig.model_validate(data)
