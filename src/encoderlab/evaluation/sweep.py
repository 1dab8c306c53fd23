"""The LR x seed grid of one checkpoint over tasks: resumable, failure-tolerant, aggregated as the paper does.

Aggregation per task: the LR with the best mean validation score over seeds is chosen; its test scores give the
mean and a 95% confidence interval (t distribution over seeds). Stability, the paper's third finding, is measured
as the standard deviation over seeds (at the chosen LR) and over LRs (of the per-LR mean test score).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch

from encoderlab.io import write_json
from encoderlab.errors import EncoderlabError
from encoderlab.evaluation import records
from encoderlab.evaluation.batched import finetune_grid
from encoderlab.evaluation.engines import ENGINES, choose_engine
from encoderlab.evaluation.finetune import backbone_state, finetune, planned_steps
from encoderlab.evaluation.metrics import mean_ci95, std
from encoderlab.evaluation.parallel import auto_workers, run_parallel, threads_per_worker
from encoderlab.evaluation.protocol import Protocol
from encoderlab.evaluation.tasks import load_task
from encoderlab.evaluation.tasks.base import EvalTask
from encoderlab.train import checkpoint as ckpt


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def prepare_tasks(specs: list[str], tokenizer, protocol: Protocol, *, cache_dir: Path | None,
                  log: Callable[[str], None]) -> list[EvalTask]:
    """Load every task first, so bad input fails before any training, then tokenise each once."""
    tasks = [load_task(spec) for spec in specs]
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise EncoderlabError(f"a task is named twice in {specs}")
    for task in tasks:
        if protocol.max_train_examples:
            task.subsample("train", protocol.max_train_examples, seed=0)
        if protocol.max_eval_examples:
            for split in ("validation", "test"):
                task.subsample(split, protocol.max_eval_examples, seed=0)
        if protocol.max_corpus_documents and hasattr(task, "limit_corpus"):
            task.limit_corpus(protocol.max_corpus_documents, seed=0)
        t0 = time.perf_counter()
        own = protocol.for_task(task.name)
        task.prepare(tokenizer, own.length_for(task.family), cache_dir)
        log(f"{task.name} ({task.family}): {task.num_train_examples():,} training examples, "
            f"{planned_steps(task, own)} steps per run, prepared in {time.perf_counter() - t0:.1f}s")
    return tasks


def run_sweep(checkpoint: str | Path, specs: list[str], protocol: Protocol, out: Path, *,
              device: torch.device | None = None, log: Callable[[str], None] = print, show_progress: bool = True,
              cache_dir: Path | None = None, prepared: dict[str, EvalTask] | None = None,
              on_prepared: Callable[[str, EvalTask], None] | None = None, engine: str = "auto",
              workers: int | str = 1) -> dict:
    """`prepared`: tasks already loaded, subsampled and tokenised for this protocol and tokenizer, by spec (a
    study's worker reuses them across checkpoints); the others are prepared here and handed to `on_prepared`.

    `engine`: how a task's runs are trained: "sequential" (one after another), "batched" (together, one computation:
    evaluation/batched.py) or "auto" (batched on CUDA; on a CPU what a short probe measures faster). It is not part
    of the protocol: both give the same records, up to float rounding.

    `workers` > 1 (CPU): the runs are spread over that many processes, each with its share of the threads
    (evaluation/parallel.py), every one of them a sequential run; "auto": as many as `auto_workers` allows."""
    if engine not in ENGINES:
        raise EncoderlabError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    device = device or default_device()
    if workers != "auto":  # "auto" is resolved below, once the runs left to do are known
        if not isinstance(workers, int) or workers < 1:
            raise EncoderlabError(f"workers must be 'auto' or a whole number, 1 or more, not {workers!r}")
        if workers > 1 and device.type != "cpu":
            raise EncoderlabError(f"workers > 1 spreads runs over CPU processes; on {device.type} the batched "
                                  "engine trains a task's runs together instead (--engine auto or batched, "
                                  "--workers 1)")
        if workers > 1 and engine == "batched":
            raise EncoderlabError("--engine batched trains a task's runs together in one process: use it with "
                                  "--workers 1, or --engine sequential/auto with several workers")
    path = ckpt.resolve(checkpoint)
    model, model_cfg, tokenizer = ckpt.load_model(path)
    weights = backbone_state(model.state_dict())
    del model
    tag = records.checkpoint_tag(path)
    prepared = dict(prepared or {})
    missing = [s for s in specs if s not in prepared]
    for spec, task in zip(missing, prepare_tasks(missing, tokenizer, protocol, cache_dir=cache_dir, log=log)):
        prepared[spec] = task
        if on_prepared is not None:
            on_prepared(spec, task)
    tasks = [prepared[s] for s in specs]
    key = records.protocol_key(protocol.model_dump(mode="json"))

    def recorded(task: EvalTask, lr: float, seed: int) -> bool:
        return records.read(records.record_path(out, tag, key, task.name, lr, seed)) is not None

    jobs = [(task, lr, seed) for task in tasks for lr in protocol.lrs for seed in protocol.seeds]
    todo = [j for j in jobs if not recorded(*j)]
    log(f"{len(jobs)} runs in the grid, {len(jobs) - len(todo)} already recorded, {len(todo)} to do")
    if workers == "auto":
        workers = auto_workers(device, engine, model_cfg, len(todo))
    baselines = {t.name: {s: t.trivial_baseline(s) for s in ("validation", "test")} for t in tasks}
    progress = _progress(len(todo), show_progress)
    started = time.perf_counter()
    done = 0

    def finished(task: EvalTask, body: dict, how: str = "") -> None:
        """Write the run's record, then count it."""
        nonlocal done
        lr, seed = body["lr"], body["seed"]
        record = {"checkpoint": str(path), "tag": tag, "task": task.name, "family": task.family,
                  "metric": task.metric, "protocol": protocol.model_dump(mode="json"),
                  "baseline": baselines[task.name], "device": str(device),
                  "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"), **body}
        records.write(records.record_path(out, tag, key, task.name, lr, seed), record)
        if body["status"] != "ok":
            log(f"run {task.name} lr={lr:g} seed={seed} failed: {body['reason']} (recorded; the sweep goes on)")
        done += 1
        progress(done, f"{task.name} lr={lr:g} seed={seed}{how}")

    def run_task(task: EvalTask, runs: list[tuple[float, int]]) -> None:
        """The task's runs in this process, batched or one after another."""
        nonlocal done
        own = protocol.for_task(task.name)  # the record keeps the whole protocol, overrides included
        if runs and choose_engine(engine, task, model_cfg, weights, runs, own, device, log) == "batched":
            first = done
            for body in finetune_grid(task, model_cfg, weights, runs, protocol=own, device=device, log=log,
                                      skip=lambda lr, seed: recorded(task, lr, seed)):
                finished(task, body, " (batched)")
            if done < first + len(runs):  # runs another sweep recorded meanwhile were skipped, not trained
                done = first + len(runs)
                progress(done, f"{task.name}: the other runs recorded by another sweep")
            return
        for lr, seed in runs:
            if recorded(task, lr, seed):  # two sweeps over the same grid share the work instead of repeating it
                done += 1
                progress(done, f"{task.name} lr={lr:g} seed={seed} (recorded by another sweep)")
                continue
            finished(task, finetune(task, model_cfg, weights, lr=lr, seed=seed, protocol=own, device=device))

    try:
        if workers > 1 and len(todo) > 1:
            log(f"{len(todo)} runs on {workers} worker processes, {threads_per_worker(workers)} thread(s) each")
            run_parallel(todo, model_cfg, weights, protocol, workers, finished)
        else:
            for task in tasks:
                run_task(task, [(lr, seed) for t, lr, seed in todo if t is task])
    finally:
        progress(None, "")
    summary = summarize([r for r in records.load_all(out, tag, key) if r["task"] in {t.name for t in tasks}])
    summary.update({"checkpoint": str(path), "tag": tag, "protocol_key": key,
                    "protocol": protocol.model_dump(mode="json"),
                    "runs_done_this_time": len(todo), "seconds_this_time": round(time.perf_counter() - started, 1)})
    write_json(out / tag / key / "summary.json", summary)
    return summary


def summarize(recs: list[dict]) -> dict:
    by_task: dict[str, list[dict]] = {}
    for r in recs:
        by_task.setdefault(r["task"], []).append(r)
    tasks = {}
    for name, rs in sorted(by_task.items()):
        ok = [r for r in rs if r["status"] == "ok"]
        entry = {"family": rs[0]["family"], "metric": rs[0]["metric"], "runs": len(rs), "failed": len(rs) - len(ok),
                 "baseline": rs[0]["baseline"]["test"]["score"],
                 "failures": [{"lr": r["lr"], "seed": r["seed"], "reason": r["reason"]} for r in rs if r not in ok]}
        by_lr: dict[float, list[dict]] = {}
        for r in ok:
            by_lr.setdefault(r["lr"], []).append(r)
        if by_lr:
            val = {lr: sum(r["scores"]["validation"]["score"] for r in g) / len(g) for lr, g in by_lr.items()}
            best = max(sorted(val), key=lambda lr: val[lr])  # ties: the smallest LR
            test = [r["scores"]["test"]["score"] for r in by_lr[best]]
            mean, half = mean_ci95(test)
            per_lr_test = [sum(r["scores"]["test"]["score"] for r in g) / len(g) for g in by_lr.values()]
            entry.update({"best_lr": best, "validation": round(val[best], 3), "test": round(mean, 3),
                          "ci95": round(half, 3) if half == half else None, "seeds": len(test),
                          # per seed at the chosen LR (category scores average them), and every ok run (spread)
                          "test_by_seed": {r["seed"]: r["scores"]["test"]["score"] for r in by_lr[best]},
                          "test_all_runs": [r["scores"]["test"]["score"] for r in ok],
                          "std_over_seeds": round(std(test), 3), "std_over_lrs": round(std(per_lr_test), 3),
                          "validation_by_lr": {f"{lr:g}": round(v, 3) for lr, v in sorted(val.items())}})
        tasks[name] = entry
    return {"tasks": tasks}


def _progress(total: int, enabled: bool):
    """Runs done / left and ETA: a live bar on a terminal, a line per run otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if not enabled or total == 0:
        return lambda done, what: None
    t0 = time.perf_counter()
    if console.is_terminal:
        bar = Progress(TextColumn("runs"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                       TextColumn("eta"), TimeRemainingColumn(), console=console)
        bar.start()
        task = bar.add_task("", total=total)

        def update(done, what):
            if done is None:
                bar.stop()
            else:
                bar.update(task, completed=done, description=what)
        return update

    def line(done, what):
        if done is not None:
            eta = (time.perf_counter() - t0) / done * (total - done)
            console.print(f"run {done}/{total} {what} done, eta {eta / 60:.1f} min")
    return line
