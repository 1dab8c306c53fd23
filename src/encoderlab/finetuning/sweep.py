"""The LR x seed grid of one checkpoint over tasks: resumable, failure-tolerant, aggregated as the paper does.

Aggregation per task (`choose_runs`, the protocol's `lr_choice`): one run kept per seed, either at the one LR with
the best mean validation score over seeds (mean_over_seeds) or at each seed's own best-validation LR (per_seed, the
authors'); the kept runs' test scores give the mean and a 95% confidence interval (t distribution over seeds).
Stability, the paper's third finding, is measured as the standard deviation over seeds (of the kept runs) and over
LRs (of the per-LR mean test score).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import torch

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_json
from encoderlab.core.process import run_lock, waiting_lock
from encoderlab.data.tokenizer import code_not_run
from encoderlab.finetuning import migrate_records, records
from encoderlab.finetuning.aggregate import summarize
from encoderlab.finetuning.batched import finetune_grid
from encoderlab.finetuning.engines import choose_engine
from encoderlab.finetuning.heartbeat import Heartbeat
from encoderlab.finetuning.memory import check_memory
from encoderlab.finetuning.model_saving import ModelSaver, check_saver, check_tasks, save_chosen, save_run
from encoderlab.finetuning.parallel import auto_workers, run_parallel, threads_per_worker
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.summary_file import summary_grids
from encoderlab.finetuning.task_prep import prepare_tasks
from encoderlab.finetuning.sweep_checks import check_execution, check_lengths, check_owner, check_specs
from encoderlab.finetuning.shared_training import (
    Unit,
    check_trainer,
    trained_by,
    training_units,
)
from encoderlab.finetuning.training import backbone_state, collector_paused, finetune
from encoderlab.model.config import ModelConfig
from encoderlab.runs import checkpoint as ckpt
from encoderlab.runs.encoders import (
    encoder_identity,
    is_continued,
    is_transformers_folder,
    load_continued_encoder,
    load_transformers_encoder,
    resolve_encoder,
    usable_positions,
)
from encoderlab.runs.logging import Progress, Wandb, require_wandb
from encoderlab.runs.optim import default_device
from encoderlab.tasks import baselines
from encoderlab.tasks.base import EvalTask

SUMMARY_LOCK = ".summary.lock"  # beside summary.json; hidden, so no reader takes it for a task or a record


def _forget_changed(prepared: dict[str, EvalTask]) -> None:
    """Drop the tasks a process prepared earlier whose data has changed since (a study run again in the same Python
    process after a task file was edited): their runs would score the old data again, and a study's job, finding no
    records of the new data, would never be done. A task whose files are gone since (or unreadable) is dropped as
    well: a sweep that asks for it is refused where every sweep's tasks are checked (`check_specs`), in one line."""
    from encoderlab.tasks import task_identity

    def changed(spec: str, task: EvalTask) -> bool:
        try:
            return task_identity(spec)[1] != task.fingerprint
        except (EncoderlabError, OSError):
            return True

    for spec in [s for s, task in prepared.items() if changed(s, task)]:
        del prepared[spec]


def run_sweep(checkpoint: str | Path, specs: list[str], protocol: Protocol, out: Path, *,
              device: torch.device | None = None, log: Callable[[str], None] = print, show_progress: bool = True,
              cache_dir: Path | None = None, prepared: dict[str, EvalTask] | None = None, engine: str = "auto",
              workers: int | str = 1, keep: ModelSaver | None = None,
              progress_log: Callable[[str], None] | None = None) -> dict:
    """`prepared`: tasks already loaded, subsampled and tokenised for this protocol and tokenizer, by spec; the
    others are prepared here and added to it (a study's worker keeps it across checkpoints).

    `engine`: how a task's runs are trained: "sequential" (one after another), "batched" (together, one computation:
    finetuning/batched.py) or "auto" (batched on CUDA, sequential on a CPU: never chosen from a timing,
    finetuning/engines.py). It is not part of the protocol: both give the same records up to float rounding, and
    each record names its engine.

    `workers` > 1 (CPU): the runs are spread over that many processes, each with its share of the threads
    (finetuning/parallel.py), every one of them a sequential run; "auto": as many as `auto_workers` allows.
    The pipeline: the runs not yet recorded -> `Sweep.execute` yields each as it ends -> its record -> summary.

    `keep`: save fine-tuned models (finetuning/model_saving.py): every run (`all`: then each trained sequentially
    here, and a recorded run without its saved model is trained again), or the runs the summary keeps (`chosen`,
    trained again after the sweep).

    `progress_log`: where the lines said while runs train go (at least every 30 s, finetuning/heartbeat.py), when not
    to `log` (a study keeps its sweeps' logs quiet, but not their heartbeat)."""
    device = device or default_device()
    check_execution(engine, workers, device)
    check_saver(keep, engine, workers)
    require_wandb(protocol.wandb, "wandb")
    prepared = {} if prepared is None else prepared
    _forget_changed(prepared)
    resolve_encoder(checkpoint, unpack=False)  # a path that is no model is named first, whatever the tasks
    shared = check_specs(specs, prepared, protocol)
    path = resolve_encoder(checkpoint)  # a named encoder is fetched once the tasks are known
    check_owner(out, path)
    model_cfg, weights, tokenizer = load_encoder(path)
    if is_transformers_folder(path) and (note := code_not_run(path)):
        log(note)
    protocol = protocol.with_context(usable_positions(model_cfg))  # what `max_length: auto` is a fraction of
    check_lengths(protocol, [*specs, *([shared] if shared else [])], prepared, model_cfg, path)
    check_tasks(keep, specs, prepared, protocol, model_cfg)  # before any task is prepared or trained
    missing = list(dict.fromkeys(s for s in [*specs, *([shared] if shared else [])] if s not in prepared))
    prepared.update(zip(missing, prepare_tasks(missing, tokenizer, protocol, cache_dir=cache_dir, log=log)))
    trainer = prepared[shared] if shared else None
    if trainer is not None:
        check_trainer(trainer, shared)
        scored = [t.name for t in trained_by([prepared[s] for s in specs], trainer) if t is not trainer]
        if scored:  # the trainer itself trains on its own pairs
            log(f"retrieval: {', '.join(scored)} scored after training on {trainer.name}'s train pairs, not "
                f"{'its' if len(scored) == 1 else 'their'} own (the protocol's retrieval.train_on; null: each task "
                "trains on its own)")
    sweep = Sweep(path, [prepared[s] for s in specs], protocol, out, device, model_cfg, weights, engine, log, trainer,
                  keep=keep, progress_log=progress_log)
    with ExitStack() as locks:  # per task: a study fine-tunes the checkpoint on other tasks beside this sweep
        if protocol.wandb is not None:
            sweep.tracker = locks.enter_context(closing(Wandb(protocol.wandb, out, sweep.tag, sweep.about())))
        for task in sweep.tasks:
            locks.enter_context(run_lock(out / sweep.tag / sweep.key / task.name, f"the {task.name} records"))
            sweep.say_what_runs_again(task)
        if note := protocol.dtype_note(device):
            log(note)  # once everything is checked: a run that goes ahead, slowly
        return sweep.run(workers, show_progress)


def load_encoder(path: Path):
    """(config, the body's weights, tokenizer) of an encoderlab checkpoint or a transformers encoder folder."""
    if is_transformers_folder(path):
        return load_transformers_encoder(path)
    if is_continued(path):
        return load_continued_encoder(path)
    model, model_cfg, tokenizer = ckpt.load_model(path)
    return model_cfg, backbone_state(model.state_dict()), tokenizer


class Outcome(NamedTuple):
    """A finished run's record body, or None for `runs` runs that another sweep recorded meanwhile (skipped)."""
    task: EvalTask
    body: dict | None
    note: str  # for the progress display
    runs: int = 1


@dataclass
class Sweep:
    """One checkpoint's LR x seed grid over tasks under one protocol, and how its runs are trained. Its records on
    disk are all it knows: a killed sweep resumes (run_sweep keeps a second sweep of a task's grid out)."""
    checkpoint: Path
    tasks: list[EvalTask]
    protocol: Protocol
    out: Path
    device: torch.device
    model_cfg: ModelConfig
    weights: dict[str, torch.Tensor]
    engine: str
    log: Callable[[str], None]
    trainer: EvalTask | None = None  # the task that trains every retrieval task's runs (shared_training.py)
    tracker: Wandb | None = None  # protocol.wandb: each record's scores, and the summary, go to W&B as well
    heartbeat: Heartbeat | None = None  # lines while runs train, whatever trains them (finetuning/heartbeat.py)
    keep: ModelSaver | None = None  # saves fine-tuned models (finetuning/model_saving.py)
    progress_log: Callable[[str], None] | None = None  # the heartbeat's lines, when not `log`

    def __post_init__(self) -> None:
        self.tag = records.checkpoint_tag(self.checkpoint)
        self.key = records.protocol_key(self.protocol.model_dump(mode="json"))
        # its records' identity: the same weights (a transformers folder: weights, config, tokenizer), wherever
        self.digest, self.files = encoder_identity(self.checkpoint)
        self.units = training_units(self.tasks, self.trainer)  # what trains: a task, or one TrainedOnce
        self.runs = [(u, lr, seed) for u in self.units for lr, seed in self.grid()]
        self.baselines = {t.name: t.baseline_scores or baselines.every(t) for t in self.tasks}
        # counted once a sweep, not once a record: a QA split's gold positions take seconds at SQuAD's size
        self.lost = {t.name: t.answers_lost() for t in self.tasks}

    def announce(self, todo: list, workers: int) -> None:
        """Before the first run: what a run needs (refused when it cannot fit); then a heartbeat while runs train."""
        if todo:
            training = [*self.tasks, *([self.trainer] if self.trainer else [])]
            check_memory(training, self.protocol, self.model_cfg, self.device, workers, self.log)
        self.heartbeat = Heartbeat(self.progress_log or self.log, len(todo))

    def path(self, task: EvalTask, lr: float, seed: int) -> Path:
        return records.record_path(self.out, self.tag, self.key, task.name, task.fingerprint, lr, seed)

    def recorded(self, unit: Unit, lr: float, seed: int) -> bool:
        """The run is done (records.recorded) and, when every run's model is kept, its model saved."""
        scored = [(t.name, t.fingerprint) for t in unit.scored_tasks]
        if not records.recorded(self.out, self.tag, self.key, scored, unit.training_task.fingerprint, lr, seed,
                                self.digest):
            return False
        return self.keep is None or self.keep.mode != "all" or self.keep.saved(unit.name, self.identity(unit, lr, seed))

    def identity(self, unit: Unit, lr: float, seed: int) -> dict:
        """What a saved model is the run of: the weights, the protocol, the data it was trained on, LR and seed."""
        return {records.WEIGHTS: self.digest, "protocol_key": self.key,
                "trained_on": unit.training_task.fingerprint, "lr": lr, "seed": seed}

    def run(self, workers: int | str, show_progress: bool) -> dict:
        """Train and record the runs not yet recorded, then summarise (and save the chosen runs' models)."""
        if self.keep is not None:
            for unit, lr, seed in self.runs:  # before anything trains
                self.keep.check_replaces(unit.name, self.identity(unit, lr, seed))
        todo = [run for run in self.runs if not self.recorded(*run)]
        follows = self.protocol.follows()
        variant = f"variant {', '.join(follows)}" if follows else "choices of several variants"
        self.log(f"protocol {self.key} ({variant}): "
                 f"{len(self.runs)} runs in the grid, {len(self.runs) - len(todo)} already recorded, {len(todo)} to do")
        workers = auto_workers(self.device, self.engine, self.model_cfg, len(todo)) if workers == "auto" else workers
        workers = 1 if self.keep is not None and self.keep.mode == "all" else workers  # saved from this process
        self.announce(todo, workers)
        progress = Progress("run", len(todo), enabled=show_progress)
        started, done = time.perf_counter(), 0
        try:  # the executor is bound to no name: an exception closes it (and its worker pool) before `finally` runs
            with collector_paused():  # between runs too: each one's end would otherwise start a full pass
                for outcome in self.execute(todo, workers):
                    if outcome.body is not None:
                        self.write(outcome.task, outcome.body)
                    done += outcome.runs
                    progress.update(done, outcome.note)
        finally:
            progress.close()
        summary = self.summarize(runs_done=len(todo), seconds=time.perf_counter() - started)
        if self.keep is not None and self.keep.mode == "chosen":
            save_chosen(self, summary["tasks"])
        return summary

    def say_what_runs_again(self, task: EvalTask) -> None:
        """Why runs that left files are done again: the task changed, or a file of its grid is not a usable record
        (`PATH: why`, the first one named); and a run of its grid recorded twice with other results under older
        grids (key algorithm 1), which record of it counts (finetuning/migrate_keys.py)."""
        if others := records.other_versions(self.out, self.tag, self.key, task.name, task.fingerprint):
            self.log(f"{task.name}: its data or definition changed since the records in {others[-1]}: running again")
        found = [records.find(self.out, self.tag, self.key, task.name, task.fingerprint, lr, seed, self.digest,
                              self.files) for lr, seed in self.grid()]
        if unused := [why for one in found if one.record is None for why in one.unused]:
            more = f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""
            self.log(f"{task.name}: {len(unused)} record(s) not used, their runs are done again: {unused[0]}{more}")
        for why in (why for one in found for why in one.differing):
            self.log(f"{task.name}: {why}")

    def grid(self) -> list[tuple[float, int]]:
        """The protocol's (lr, seed) runs: the records this sweep counts, of all those its key holds."""
        return [(lr, seed) for lr in self.protocol.lrs for seed in self.protocol.seeds]

    def execute(self, todo: list[tuple[EvalTask, float, int]], workers: int) -> Iterator[Outcome]:
        """The runs left to do, as they end: spread over worker processes, or task by task in this process."""
        if workers > 1 and len(todo) > 1:
            self.log(f"{len(todo)} runs on {workers} worker processes, {threads_per_worker(workers)} thread(s) each")
            beat = self.heartbeat and self.heartbeat.waiting
            for task, body in run_parallel(todo, self.model_cfg, self.weights, self.protocol, workers, on_wait=beat):
                yield Outcome(task, {**body, "engine": "sequential"},
                              f"{task.name} lr={body['lr']:g} seed={body['seed']}")
            return
        for unit in self.units:
            if runs := [(lr, seed) for t, lr, seed in todo if t is unit]:
                yield from self._execute_task(unit, runs)

    def _execute_task(self, task: EvalTask, runs: list[tuple[float, int]]) -> Iterator[Outcome]:
        """Batched or one after another; each run is looked up on disk just before it starts (another sweep over
        the grid may have recorded it meanwhile)."""
        own = self.protocol.for_task(task.name)  # the record keeps the whole protocol, overrides included
        args = (task, self.model_cfg, self.weights)
        engine = "sequential" if self.keep is not None and self.keep.mode == "all" else self.engine  # model_saving.py
        if choose_engine(engine, *args, runs, own, self.device, self.log) == "batched":
            trained = 0
            for body in finetune_grid(*args, runs, protocol=own, device=self.device, log=self.progress_log or self.log,
                                      skip=lambda lr, seed: self.recorded(task, lr, seed)):
                trained += 1
                yield Outcome(task, {**body, "engine": "batched"},
                              f"{task.name} lr={body['lr']:g} seed={body['seed']} (batched)")
            if trained < len(runs):
                yield Outcome(task, None, f"{task.name}: the other runs recorded by another sweep", len(runs) - trained)
            return
        for lr, seed in runs:
            if self.recorded(task, lr, seed):
                yield Outcome(task, None, f"{task.name} lr={lr:g} seed={seed} (recorded by another sweep)")
            else:
                if self.heartbeat is not None:
                    self.heartbeat.start(f"{task.name} lr={lr:g} seed={seed}")
                body = finetune(*args, lr=lr, seed=seed, protocol=own, device=self.device,
                                on_step=self.heartbeat and self.heartbeat.step, on_trained=self._saver(task))
                yield Outcome(task, {**body, "engine": "sequential"}, f"{task.name} lr={lr:g} seed={seed}")

    def _saver(self, unit: Unit):
        """The `on_trained` of a run whose model is saved: the keeper gets it with the records it scored."""
        if self.keep is None or self.keep.mode != "all":
            return None
        return lambda backbone, head, body: save_run(self, unit, backbone, head, body)

    def write(self, unit: Unit, body: dict) -> None:
        """A finished run's records, one per task it scores: its results (`body`, ok or failed) and what it was a
        run of, `trained_on` included (the task whose train split trained the model)."""
        bodies = unit.bodies_by_task(body)
        for task in unit.scored_tasks:
            self._write(task, unit.training_task, bodies[task.name])
        if body["status"] != "ok":
            self.log(f"run {unit.name} lr={body['lr']:g} seed={body['seed']} failed: {body['reason']} (recorded; "
                     "the sweep goes on)")

    def _write(self, task: EvalTask, train: EvalTask, body: dict) -> None:
        lr, seed = body["lr"], body["seed"]
        records.write(self.path(task, lr, seed), self.record(task, train, body))
        if self.tracker is not None and body["status"] == "ok":
            scores = {f"runs/{task.name}/{split}": body["scores"][split]["score"] for split in ("validation", "test")}
            self.tracker.log({**scores, f"runs/{task.name}/lr": lr, f"runs/{task.name}/seed": seed})

    def record(self, task: EvalTask, train: EvalTask, body: dict) -> dict:
        """The record of `task` for a run trained on `train` with this result body."""
        base, trivial = self.baselines[task.name], baselines.trivial_name(task)
        return {"format_version": migrate_records.FORMAT, "tag": self.tag,
                "checkpoint": str(self.checkpoint.resolve()),  # what records.other_owner reads, from any folder
                "records_root": str(self.out.resolve()),  # records copied with a project are not its own models'
                records.WEIGHTS: self.digest, "task": task.name, "fingerprint": task.fingerprint,
                "family": task.family, "metric": task.metric,
                "scheme": task.scheme, "protocol": self.protocol.model_dump(mode="json"),
                "max_length": self.protocol.for_task(task.name).length_for(task.family),  # `auto` resolved
                "truncated": {**task.truncated, "unit": task.truncation_unit},
                "truncation_totals": task.truncation_totals(),  # what each count of `truncated` is out of
                "answers_lost": self.lost[task.name],  # QA tagging: answers the cut inputs lost; None elsewhere
                "examples": {s: task.scored_examples(s) for s in ("validation", "test")},  # what a score averages
                "baseline": {s: base[s][trivial] for s in base}, "baselines": base, "device": str(self.device),
                "trained_on": {"task": train.name, "fingerprint": train.fingerprint},
                "data_split": task.data_split, **({records.MODEL_FILES: self.files} if self.files else {}),
                "finished": datetime.now(timezone.utc).isoformat(timespec="microseconds"), **body}

    def about(self) -> dict:
        return {"checkpoint": str(self.checkpoint), "tag": self.tag, records.WEIGHTS: self.digest,
                "protocol_key": self.key, "protocol": self.protocol.model_dump(mode="json")}

    def summarize(self, *, runs_done: int, seconds: float) -> dict:
        """This sweep's tasks, aggregated over every record of their grid (earlier sweeps' included, of this grid or
        a larger one: records of LRs and seeds it does not ask for are not counted); summary.json holds every task
        recorded for this checkpoint and protocol (the newest version of each), each under its own grid
        (`write_summary`), so that a sweep of some tasks does not drop the others from it."""
        grid = (self.protocol.lrs, self.protocol.seeds)
        # read and rewritten under one lock: a sweep of other tasks into this folder, ending meanwhile, would
        # otherwise have its tasks dropped from summary.json by this sweep's older view of the records
        with waiting_lock(self.out / self.tag / self.key / SUMMARY_LOCK):
            every = records.load_all(self.out, self.tag, self.key, self.digest)  # of every grid: read once for both
            file = self.write_summary(every)
        found = records.in_grid(every, grid)
        ours = {(t.name, t.fingerprint) for t in self.tasks}
        about = self.about()
        choice = self.protocol.lr_choice
        summary = summarize([r for r in found if (r["task"], r.get("fingerprint")) in ours], choice)
        if self.tracker is not None:
            self.tracker.summarize({f"{name}/{key}": t[key] for name, t in summary["tasks"].items()
                                    for key in ("test", "ci95", "best_lr", "validation") if t.get(key) is not None})
        return {**summary, **about, "runs_done_this_time": runs_done, "seconds_this_time": round(seconds, 1),
                "summary_file": str(file)}

    def write_summary(self, every: list[dict]) -> Path:
        """summary.json of the folder's records (`every`, of every grid): each task aggregated under its grid
        (finetuning/summary_file.py `summary_grids`: an earlier grid only where the task's data now has every run of
        it), named in its entry; `protocol` is this sweep's, its grid as asked."""
        file = self.out / self.tag / self.key / "summary.json"
        now = {t.name: t.fingerprint for t in self.tasks}  # this sweep's tasks by their data now, not the newest
        older = [f / "summary.json" for f in records.folders(self.out, self.tag, self.key)[1:]]
        names = sorted({r["task"] for r in every})
        done = {name: [(r["lr"], r["seed"]) for r in every if (r["task"], r["fingerprint"]) == (name, fingerprint)]
                for name, fingerprint in now.items()}  # a grid held from other data is not kept (summary_file.py)
        counted = records.current(every, now)  # each task's records of the data counted, of every grid
        recorded = {name: [(r["lr"], r["seed"]) for r in counted if r["task"] == name] for name in names}
        grids = summary_grids(file, (self.protocol.lrs, self.protocol.seeds), done, recorded, older)
        kept = [r for name in names for r in records.in_grid([r for r in every if r["task"] == name], grids[name])]
        summary = summarize(records.current(kept, now), self.protocol.lr_choice)
        for name, entry in summary["tasks"].items():
            entry["grid"] = {"lrs": list(grids[name][0]), "seeds": list(grids[name][1])}
        write_json(file, {**summary, **self.about()})
        return file

