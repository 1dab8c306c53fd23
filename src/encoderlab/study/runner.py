"""Execute a study's plan: pretraining runs in dependency order, then fine-tuning sweeps; resumable, in parallel.

The jobs and what makes each done are in study/jobs.py; nothing is remembered but what is on disk, so a killed
study started again redoes nothing finished. A job that raises is written to `status/` with its reason, and each of
its dependents, by name, as skipped; the rest goes on, and the next start retries them (the command then exits
non-zero). A run is done only for the settings it was started with: a study file changed since is refused
(`refuse_changed`). Imported models (study/imported.py) are imported and their text packed before any job starts.

Parallelism: independent jobs go to `workers` processes (spawned, so each sets its own thread count), each with
cores / workers threads. On a multi-GPU machine, run one `study run --job ...` per GPU (docs/studies.md).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from encoderlab.core.errors import EncoderlabError, command
from encoderlab.core.io import atomic_file, write_json
from encoderlab.core.process import drop_if_only_lock, run_lock
from encoderlab.pretraining.setup import resolve_device
from encoderlab.runs.optim import default_device, fp32_auto_note
from encoderlab.study.existing import import_checkpoints
from encoderlab.study.imported import prepare_imports
from encoderlab.study.jobs import EvalJob, MtebJob, PretrainJob, RandomInitJob, jobs_of
from encoderlab.study.plan import Plan, build_plan, expand_tasks
from encoderlab.study.scheduler import JobStates, Job, progress, run_jobs

__all__ = ["execute", "run_study", "check_runnable", "check_succeeded"]


def execute(job: Job, log: Callable[[str], None] | None = None,
            progress: Callable[[str], None] | None = None) -> dict:
    """Run one job to the end; returns a short summary. Raises on failure (the scheduler records it). `progress`:
    where a job says, at least every 30 s, how it goes (a pretraining run's step, an eval job's sweep's runs), each
    line prefixed with the job's id."""
    return job.execute(log or (lambda m: None), progress and (lambda m, say=progress: say(f"{job.id}: {m}")))


def _run_in_worker(job: Job) -> dict:
    # its heartbeat (a pretraining run's step, a sweep's runs) goes to the study's log, from whichever process runs it
    return execute(job, progress=progress)


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
        if isinstance(job, PretrainJob):
            path = folder / f"{job.config.name}.yaml"
            with atomic_file(path) as tmp:
                config_dict = job.config.model_dump(mode="json")
                # The dtype the study file asked for: `auto` is decided where the job runs, not on this machine.
                config_dict["train"]["dtype"] = job.config.train.dtype_asked
                tmp.write_text(yaml.safe_dump(config_dict, sort_keys=False))
            config = str(path)
        lines.append(f"{job.id}\t{','.join(job.deps)}\t{config}")
    with atomic_file(folder / "jobs.tsv") as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def run_study(plan: Plan, base_dir: Path, *, workers: int = 1, log: Callable[[str], None] = print,
              only: str | None = None, job_id: str | None = None) -> dict:
    """Run every job not yet done. `only`: 'pretrain' stops before evaluation; `job_id`: that job alone (its
    dependencies must be done: a cluster scheduler orders them). Returns counts and failures.
    The pipeline: the jobs and what is done (`JobStates`) -> `run_jobs` yields each job as it ends -> record it.
    One process runs a study at a time (the study folder's lock): another one would take the first one's running
    jobs for failed ones. `--job`s share it, each job's own folders locking themselves."""
    check_runnable(plan, only, job_id)
    created = not plan.root.exists()
    try:
        with run_lock(plan.root, f"study {plan.spec.name}", shared=job_id is not None):
            return _run_study(plan, base_dir, workers=workers, log=log, only=only, job_id=job_id)
    except EncoderlabError:
        if created:
            drop_if_only_lock(plan.root)  # a refused new study leaves no folder behind
        raise


def check_runnable(plan: Plan, only: str | None = None, job_id: str | None = None, *,
                   planning: bool = False) -> None:
    """What `study run` checks of a plan before any work, and `study plan` and `--dry-run` with it: the tasks of
    the evaluations it will run (`check_tasks`). `planning`: a plan may come before `data prepare offline`, so
    plain task names are taken on trust while no offline task is prepared."""
    if only is None and (job_id is None or job_id.startswith(("eval:", "mteb:"))):
        check_tasks(plan, planning=planning)


def check_tasks(plan: Plan, planning: bool = False) -> None:
    """Every task the study evaluates names one, once per model, before anything runs: an unknown one failed only
    its evaluation jobs, after the pretraining they waited for."""
    from encoderlab.finetuning.shared_training import check_trainer_spec, trainer_spec
    from encoderlab.tasks import offline_task_names, split_spec, task_family, task_identity

    unprepared = planning and not offline_task_names()

    known: dict[str, str] = {}  # spec -> the name its records are filed under
    for evaluation in plan.evaluations:
        tasks = expand_tasks(evaluation.tasks)
        if twice := [t for i, t in enumerate(tasks) if t in tasks[:i]]:
            raise EncoderlabError(f"study {plan.spec.name}: task {twice[0]!r} is listed twice for {evaluation.label}; "
                                  "list each task once")
        for task in (t for t in tasks if t not in known):
            try:
                if unprepared and not task.endswith((".yaml", ".yml")) and not split_spec(task)[1]:
                    known[task] = split_spec(task)[0]
                    continue  # a plain name or a paper dataset: known once the data is prepared
                known[task] = task_identity(task)[0]
            except EncoderlabError as e:
                raise EncoderlabError(f"study {plan.spec.name}: evaluation task {task!r}: {e}") from None
        _refuse_shared_names(plan, evaluation.label, [(t, known[t]) for t in tasks])
    if shared := trainer_spec(plan.protocol, sorted(known), task_family):
        check_trainer_spec(shared)
    if plan.spec.evaluation.mteb:
        from encoderlab.hub.mteb_eval import check_tasks as check_mteb

        try:
            check_mteb(plan.spec.evaluation.mteb)
        except EncoderlabError as e:
            raise EncoderlabError(f"study {plan.spec.name}: evaluation.mteb: {e}") from None


def _refuse_shared_names(plan: Plan, label: str, named: list[tuple[str, str]]) -> None:
    """Two task specs of one model with the same name (a task file named like an offline task, one file by two
    paths): their records share a folder, and the report would keep one and silently drop the other."""
    first: dict[str, str] = {}
    for task, name in named:
        if name in first:
            raise EncoderlabError(f"study {plan.spec.name}: tasks {first[name]!r} and {task!r} of {label} are both "
                                  f"named {name!r}, and a task's records are filed under its name: list it once, or "
                                  "give a task file another `name:`")
        first[name] = task


def _run_study(plan: Plan, base_dir: Path, *, workers: int, log: Callable[[str], None], only: str | None,
               job_id: str | None) -> dict:
    if plan.spec.imported:  # before anything trains; then the plan has the imports' own shapes, not a hint's
        prepare_imports(plan.spec, base_dir, plan.root, plan.base_config.get("data", {}).get("path", "offline"),
                        log=log)
        plan = build_plan(plan.spec, base_dir)
    import_checkpoints(plan.spec, base_dir, plan.root, log=log)  # existing models as transformers folders
    all_jobs = jobs_of(plan)
    refuse_changed(plan, all_jobs)
    jobs = [j for j in all_jobs if only is None or not isinstance(j, (EvalJob, MtebJob))]
    jobs = jobs if job_id is None else [_one_job(all_jobs, job_id, plan)]  # refused before anything is written
    plan.root.mkdir(parents=True, exist_ok=True)
    write_json(plan.root / "plan.json", plan.record(base_dir))
    write_configs(plan, all_jobs)
    states = JobStates(jobs, done={j.id for j in jobs if j.is_done()})
    clear_stale_status(plan, all_jobs, states.done)
    log(f"study {plan.spec.name}: {len(jobs)} jobs, {len(states.done)} already done, {len(states.pending)} to do "
        f"({workers} worker{'s' if workers > 1 else ''})")
    for note in dtype_notes(states.pending):
        log(note)
    started = time.perf_counter()
    (plan.root / "status").mkdir(parents=True, exist_ok=True)
    for job, result, error in run_jobs(states, workers, _run_in_worker, say=log):
        if error is None:
            states.finish(job)
            status_file(plan, job.id).unlink(missing_ok=True)
            log(f"done {job.id} {_brief(result)}; {len(states.done)}/{len(jobs)} done, {len(states.pending)} left, "
                f"{time.perf_counter() - started:.0f}s")
            continue
        write_json(status_file(plan, job.id), {"job": job.id, "status": "failed", "reason": error})
        log(f"FAILED {job.id}: {error.splitlines()[0]} (recorded in {status_file(plan, job.id)})")
        for other in states.fail(job, error):  # by name, each with the reason it did not run
            write_json(status_file(plan, other), {"job": other, "status": "skipped", "reason": f"{job.id} failed"})
            log(f"skipped {other}: it depends on {job.id}, which failed")
    return {"jobs": len(jobs), "done": len(states.done), "done_now": states.done_now, "failed": states.failed,
            "skipped": sorted(states.skipped), "logs": {j: str(status_file(plan, j)) for j in states.failed},
            "seconds": round(time.perf_counter() - started, 1)}


def clear_stale_status(plan: Plan, jobs: list[Job], done: set[str]) -> None:
    """Remove what no longer holds from `status/`: a job's failure once it counts as done, and jobs the plan no longer
    has (the report reads the folder: a stale file there would call a finished study incomplete)."""
    planned = {status_file(plan, j.id).name: j.id for j in jobs}
    for path in sorted((plan.root / "status").glob("*.json")):
        if path.name not in planned or planned[path.name] in done:
            path.unlink(missing_ok=True)


def dtype_notes(jobs: list[Job]) -> list[str]:
    """What the jobs to do will say about their dtype, said once here: a job's own lines go nowhere in a study (its
    worker's log is quiet), and these must reach the user before the time is spent. A pretraining run asked for bf16
    where it is not native, or given fp32 by `auto` on a CPU; sweeps whose protocol asks for bf16 where it is not (a
    protocol's `auto` is resolved when read and not kept: a sweep's fp32 is not told from one asked for)."""
    notes = []
    for job in jobs:
        if isinstance(job, PretrainJob):
            train = job.config.train
            try:
                device = resolve_device(train.device)
            except EncoderlabError:  # no CUDA here: the job refuses itself, naming train.device
                continue
            notes += [train.dtype_note(device), fp32_auto_note("train.dtype", train.dtype_asked, train.dtype, device)]
        elif isinstance(job, EvalJob):
            notes.append(job.protocol.dtype_note(default_device()))
    return [n for n in dict.fromkeys(notes) if n is not None]


def check_succeeded(result: dict, name: str) -> None:
    """Raise `Failed` (exit code 1), in one line naming each failed job and its log, if any job failed (a skipped
    one follows a failed one): `study run` exits non-zero, so that a scheduler's `afterok` dependents do not start."""
    from encoderlab.core.errors import Failed

    if not result["failed"]:
        return
    failed = ", ".join(f"{job} (log: {result['logs'][job]})" for job in result["failed"])
    skipped = f"; {len(result['skipped'])} jobs that depend on them skipped" if result["skipped"] else ""
    again = command("encoderlab study run", "encoderlab.run_study")
    raise Failed(f"study {name}: {len(result['failed'])} of {result['jobs']} jobs failed: {failed}{skipped}; "
                 f"`{again}` runs them again once the cause is fixed")


def status_file(plan: Plan, job_id: str) -> Path:
    """Where a job that did not finish says why (its error and where it was raised)."""
    return plan.root / "status" / f"{job_id.replace(':', '__').replace('/', '_')}.json"


def refuse_changed(plan: Plan, jobs: list[Job]) -> None:
    """A study folder holds the results of one configuration. A run started with other settings than the study file
    now gives is refused, naming the keys, before anything is written: resuming or skipping it would report the old
    settings as the new ones, and running it again into its folder would replace the checkpoints that the study's
    records were made from."""
    from encoderlab.pretraining.resume import INITIAL_WEIGHTS, changes_from_saved

    changed: dict[str, list[str]] = {}
    # An unfinished random-init baseline is started again from scratch anyway (RandomInitJob): nothing to mix. A
    # finished one is the seed's initialisation: another budget, LR or objective of the run it copies makes the same
    # weights, so only what makes them is compared.
    for job in jobs:
        config = job.config if isinstance(job, (PretrainJob, RandomInitJob)) else None
        only = INITIAL_WEIGHTS if isinstance(job, RandomInitJob) else None
        if config is not None and (isinstance(job, PretrainJob) or job.is_done()) \
                and (diff := changes_from_saved(config, only)):
            changed.setdefault(diff, []).append(job.id)
    if changed:
        what = "; ".join(f"{diff} in {', '.join(ids)}" for diff, ids in changed.items())
        raise EncoderlabError(f"study {plan.spec.name}: the study file now gives other settings than those its runs "
                              f"in {plan.root} were started with: {what}; nothing was run: restore those settings, or "
                              "give the study another name to run it in a new folder")


def _one_job(jobs: list[Job], job_id: str, plan: Plan) -> Job:
    known = {j.id: j for j in jobs}
    if job_id not in known:
        shown = ", ".join(list(known)[:3])
        raise EncoderlabError(f"no job {job_id!r} in study {plan.spec.name}; its {len(known)} jobs are {shown}, ... "
                              f"(`encoderlab study plan STUDY --write-configs` lists them in {plan.root}/configs/"
                              "jobs.tsv)")
    missing = [d for d in known[job_id].deps if not (Path(d.split("@", 1)[1]).exists() if "@" in d
                                                     else known[d].is_done())]
    if missing:
        raise EncoderlabError(f"job {job_id} needs {', '.join(missing)} to finish first")
    return known[job_id]


def _brief(result: dict | None) -> str:
    if not result:
        return ""
    bits = [f"{result['seconds']}s"]
    if result.get("loss"):
        bits += [f"{k.removeprefix('val/')} {v}" for k, v in result["loss"].items()]
    if result.get("test") is not None:
        bits.append(f"test {result['test']:.2f}")
    return "(" + ", ".join(bits) + ")"
