"""Execute a study's plan: pretraining runs in dependency order, then fine-tuning sweeps; resumable, in parallel.

Nothing is remembered but what is on disk: a pretraining run is done when its final checkpoint and summary exist
(a partial one resumes from its last checkpoint), an evaluation when every (LR, seed) record exists. So a killed
study started again redoes nothing finished. A job that raises is written to `status/` with its reason and its
dependents are skipped; the rest goes on, and the next start retries it. Imported models (study/imported.py) are
imported and their text packed before any job starts.

Parallelism: independent jobs go to `workers` processes (spawned, so each sets its own thread count), each with
cores / workers threads. On a multi-GPU machine, run one `study run --job ...` per GPU (docs/studies.md).
"""
from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from encoderlab.data.atomic import write_json
from encoderlab.evaluation import records
from encoderlab.train.checkpoint import checkpoint_name
from encoderlab.study.imported import prepare_imports
from encoderlab.study.plan import Plan, build_plan, expand_tasks, load_protocol


@dataclass
class Job:
    id: str
    kind: str  # "pretrain", "random" or "eval"
    deps: list[str]  # job ids, or "JOB@PATH": that job's checkpoint at PATH exists (a branch needs no more)
    args: dict
    cost: float = 1.0  # ordering hint: big jobs first keep the workers busy to the end
    dependents: list[str] = field(default_factory=list)


def jobs_of(plan: Plan, base_dir: Path) -> list[Job]:
    protocol = load_protocol(plan.spec, base_dir)
    jobs: list[Job] = []
    for run in plan.order():
        # A branch starts as soon as its parent has written the branch-point checkpoint, not when it finishes.
        deps = [f"pretrain:{run.parent}@{plan.checkpoint(run.parent, run.branch_step)}"] if run.parent else []
        deps += [f"pretrain:{run.init}"] if run.init else []
        jobs.append(Job(f"pretrain:{run.name}", "pretrain", deps, {"config": plan.config(run)},
                        cost=float(run.steps - run.branch_step)))
    for e in {e.size: e for e in plan.evaluations if e.kind == "random"}.values():  # one per size
        same_size = next((r for r in plan.runs.values() if r.size == e.size), None)  # its model, before any step
        jobs.append(Job(f"random:{e.size}", "random", [], {
            "size": e.size, "config": plan.config(same_size) if same_size else None,
            "checkpoint": str(plan.eval_checkpoint(e))}))
    for e in plan.evaluations:
        deps = [f"pretrain:{e.run}" if e.run else f"random:{e.size}"] if e.kind != "imported" else []
        for task in expand_tasks(e.tasks):
            jobs.append(Job(f"eval:{e.label}:{task}", "eval", deps,
                            {"checkpoint": str(plan.eval_checkpoint(e)), "task": task,
                             "protocol": protocol.model_dump(mode="json"), "out": str(plan.root / "evals")}))
    by_id = {j.id: j for j in jobs}
    for j in jobs:
        for d in j.deps:
            by_id[d.split("@")[0]].dependents.append(j.id)
    return jobs


def is_done(job: Job) -> bool:
    if job.kind == "pretrain":
        cfg = job.args["config"]
        run_dir = Path(cfg["out_dir"]) / cfg["name"]
        step = cfg["train"]["steps"]
        return (run_dir / "summary.json").exists() and (run_dir / "checkpoints" / checkpoint_name(step)).exists()
    if job.kind == "random":
        return (Path(job.args["checkpoint"]) / "state.json").exists()
    protocol = job.args["protocol"]
    tag = records.checkpoint_tag(job.args["checkpoint"])
    key = records.protocol_key(protocol)
    out = Path(job.args["out"])
    return all(records.read(records.record_path(out, tag, key, job.args["task"], lr, seed)) is not None
               for lr in protocol["lrs"] for seed in protocol["seeds"])


# ------------------------------------------------------------------------------------------------ in a worker

_PREPARED: dict[tuple, object] = {}  # per worker process: tasks tokenised once, reused for every checkpoint


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def execute(job: Job, log: Callable[[str], None] | None = None) -> dict:
    """Run one job to the end; returns a short summary. Raises on failure (the scheduler records it)."""
    log = log or (lambda m: None)
    started = time.perf_counter()
    if job.kind == "pretrain":
        from encoderlab.config import validate
        from encoderlab.train.config import PretrainConfig
        from encoderlab.train.loop import Trainer

        cfg = validate(PretrainConfig, job.args["config"], where=job.id)
        result = Trainer(cfg, resume=True, log=log, show_progress=False).run()
        loss = {k: round(v, 3) for k, v in result["final"].items() if k.startswith("val/")}
        return {"seconds": round(time.perf_counter() - started, 1), "loss": loss}
    if job.kind == "random":
        return _random_init(job)
    return _evaluate(job, log, started)


def _random_init(job: Job) -> dict:
    """A checkpoint of the untrained model (the seed's initialisation): the random-init baseline."""
    import shutil

    from encoderlab.config import validate
    from encoderlab.train import checkpoint
    from encoderlab.train.config import PretrainConfig
    from encoderlab.train.loop import Trainer

    if job.args["config"] is None:
        raise RuntimeError(f"random-init baseline for size {job.args['size']}: no run of that size to copy "
                           "the data and model settings from")
    ckpt = Path(job.args["checkpoint"])
    run_dir = ckpt.parent.parent
    cfg = dict(job.args["config"], init={}, name=run_dir.name, out_dir=str(run_dir.parent))
    if run_dir.exists():
        shutil.rmtree(run_dir)  # never finished (the checkpoint is the last thing written): start clean
    trainer = Trainer(validate(PretrainConfig, cfg, where=job.id), log=lambda m: None, show_progress=False)
    checkpoint.save_weights_only(ckpt, trainer.module.state_dict(), trainer.model_cfg,
                                 trainer.train_data.root / "tokenizer", {"reason": "random-init", "total_steps": 0})
    return {"seconds": 0.0}


def _evaluate(job: Job, log: Callable[[str], None], started: float) -> dict:
    from encoderlab.config import validate
    from encoderlab.data.wheels import encoderlab_home
    from encoderlab.evaluation.protocol import Protocol
    from encoderlab.evaluation.sweep import run_sweep
    from encoderlab.train import checkpoint

    protocol = validate(Protocol, job.args["protocol"], where=job.id)
    task = job.args["task"]
    tok = (checkpoint.resolve(job.args["checkpoint"]) / "tokenizer" / "tokenizer.json").read_bytes()
    key = (task, records.protocol_key(job.args["protocol"]), hash(tok))
    prepared = {task: _PREPARED[key]} if key in _PREPARED else None
    summary = run_sweep(job.args["checkpoint"], [task], protocol, Path(job.args["out"]), log=lambda m: None,
                        show_progress=False, cache_dir=encoderlab_home() / "cache" / "tasks", prepared=prepared,
                        on_prepared=lambda _, t: _PREPARED.__setitem__(key, t))
    entry = summary["tasks"].get(task, {})
    return {"seconds": round(time.perf_counter() - started, 1), "test": entry.get("test"),
            "failed": entry.get("failed", 0)}


def _run_in_worker(job: Job) -> dict:
    return execute(job)


# ------------------------------------------------------------------------------------------------ the scheduler


def write_configs(plan: Plan, jobs: list[Job]) -> None:
    """Each pretraining run's config as a YAML file `encoderlab pretrain` (or torchrun) takes, plus jobs.tsv with
    the dependencies: what a cluster scheduler needs to run the study as separate jobs (docs/studies.md)."""
    import yaml

    folder = plan.root / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["job\tdepends_on\tconfig"]
    for job in jobs:
        config = ""
        if job.kind == "pretrain":
            path = folder / f"{job.args['config']['name']}.yaml"
            path.write_text(yaml.safe_dump(job.args["config"], sort_keys=False))
            config = str(path)
        lines.append(f"{job.id}\t{','.join(job.deps)}\t{config}")
    (folder / "jobs.tsv").write_text("\n".join(lines) + "\n")


def run_study(plan: Plan, base_dir: Path, *, workers: int = 1, log: Callable[[str], None] = print,
              only: str | None = None, job_id: str | None = None) -> dict:
    """Run every job not yet done. `only`: 'pretrain' stops before evaluation; `job_id`: that job alone (its
    dependencies must be done: a cluster scheduler orders them). Returns counts and failures."""
    from encoderlab.errors import EncoderlabError

    if plan.spec.imported:  # before anything trains; then the plan has the imports' own shapes, not a hint's
        prepare_imports(plan.spec, base_dir, plan.root, plan.base_config.get("data", {}).get("path", "offline"),
                        log=log)
        plan = build_plan(plan.spec, base_dir)
    all_jobs = jobs_of(plan, base_dir)
    plan.root.mkdir(parents=True, exist_ok=True)
    write_json(plan.root / "plan.json", plan.record(base_dir))
    write_configs(plan, all_jobs)
    jobs = [j for j in all_jobs if only is None or j.kind != "eval"]
    if job_id is not None:
        known = {j.id: j for j in all_jobs}
        if job_id not in known:
            raise EncoderlabError(f"no job {job_id!r} in study {plan.spec.name}: see {plan.root}/configs/jobs.tsv")
        missing = [d for d in known[job_id].deps if not (Path(d.split("@", 1)[1]).exists() if "@" in d
                                                         else is_done(known[d]))]
        if missing:
            raise EncoderlabError(f"job {job_id} needs {', '.join(missing)} to finish first")
        jobs = [known[job_id]]
    by_id = {j.id: j for j in jobs}
    status_dir = plan.root / "status"
    done = {j.id for j in jobs if is_done(j)}
    failed: dict[str, str] = {}
    skipped: set[str] = set()
    pending = [j for j in jobs if j.id not in done]
    log(f"study {plan.spec.name}: {len(jobs)} jobs, {len(done)} already done, {len(pending)} to do "
        f"({workers} worker{'s' if workers > 1 else ''})")
    started = time.perf_counter()
    finished_now = 0

    def _satisfied(dep: str) -> bool:
        job, _, path = dep.partition("@")
        if path:
            return job not in failed and (job in done or Path(path).exists())
        return job in done or job not in by_id

    def ready() -> list[Job]:
        out = [j for j in pending if all(_satisfied(d) for d in j.deps)]
        return sorted(out, key=lambda j: (j.kind == "eval", -j.cost, j.id))

    def settle(job: Job, result: dict | None, error: str | None) -> None:
        nonlocal finished_now
        pending.remove(job)
        marker = status_dir / f"{job.id.replace(':', '__').replace('/', '_')}.json"
        if error is None:
            done.add(job.id)
            finished_now += 1
            marker.unlink(missing_ok=True)
            log(f"done {job.id} {_brief(result)}; {len(done)}/{len(jobs)} done, {len(pending)} left, "
                f"{time.perf_counter() - started:.0f}s")
        else:
            failed[job.id] = error
            write_json(marker, {"job": job.id, "status": "failed", "reason": error})
            log(f"FAILED {job.id}: {error.splitlines()[-1] if error else ''} (recorded in {marker})")
            _skip_dependents(job)

    def _skip_dependents(job: Job) -> None:
        for d in job.dependents:
            dep = by_id.get(d)
            if dep is not None and dep in pending:
                pending.remove(dep)
                skipped.add(dep.id)
                _skip_dependents(dep)

    status_dir.mkdir(parents=True, exist_ok=True)
    if workers <= 1:
        while True:
            batch = ready()
            if not batch:
                break
            job = batch[0]
            try:
                result = execute(job, log=lambda m: None)
                settle(job, result, None)
            except Exception as exc:  # noqa: BLE001 - any failure of one job is recorded, the study goes on
                settle(job, None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        ctx = get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(threads,)) as pool:
            running: dict[Future, Job] = {}
            while True:
                busy = {j.id for j in running.values()}
                for job in ready():
                    if len(running) >= workers:
                        break
                    if job.id not in busy:
                        running[pool.submit(_run_in_worker, job)] = job
                if not running:
                    break
                # a timeout, so branches start when their checkpoint appears, not only when a job ends
                finished, _ = wait(running, timeout=2.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    job = running.pop(fut)
                    try:
                        settle(job, fut.result(), None)
                    except Exception as exc:  # noqa: BLE001
                        settle(job, None, f"{type(exc).__name__}: {exc}")
    return {"jobs": len(jobs), "done": len(done), "done_now": finished_now, "failed": failed,
            "skipped": sorted(skipped), "seconds": round(time.perf_counter() - started, 1)}


def _brief(result: dict | None) -> str:
    if not result:
        return ""
    bits = [f"{result['seconds']}s"]
    if result.get("loss"):
        bits += [f"{k.removeprefix('val/')} {v}" for k, v in result["loss"].items()]
    if result.get("test") is not None:
        bits.append(f"test {result['test']:.2f}")
    return "(" + ", ".join(bits) + ")"
