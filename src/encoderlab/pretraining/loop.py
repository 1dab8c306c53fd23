"""The pretraining loop: AdamW, LR schedule, objective phases, bf16 autocast, accumulation, checkpoints, logs.

Data parallelism (DDP, FSDP2 under torchrun) and the speed switches are pretraining/distributed.py's business; this loop
only calls it: rank r trains on the r-th slice of each global batch, and the step's token count, loss and accuracy
are summed over ranks, so the update is the single-process one whatever the number of processes.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import torch

from encoderlab.core.errors import EncoderlabError, is_out_of_memory, option
from encoderlab.core.io import check_writable, write_json
from encoderlab.core.process import drop_if_only_lock, run_lock
from encoderlab.core.seeds import STEP_DRAWS, derive_seed
from encoderlab.data import packing
from encoderlab.data.loader import PackedDataset, PackedLoader
from encoderlab.model import attention
from encoderlab.pretraining import distributed, objectives
from encoderlab.pretraining import resume as same_run
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.divergence import Watch, out_of_memory
from encoderlab.pretraining.setup import (check_compatible, check_source, initial_model, model_config, resolve_device,
                                         run_data)
from encoderlab.runs import checkpoint, optim
from encoderlab.runs.logging import MetricsLog, Progress, describe_step, read_metrics


class Trainer:
    def __init__(self, cfg: PretrainConfig, *, resume: bool = False, extend: bool = False,
                 log: Callable[[str], None] = print, show_progress: bool | Callable[[str], None] = True,
                 adopt_config: bool = False):
        """`resume`: continue the run in the folder if there is one (the same run: resume.py), else start it; `extend`:
        to more steps (implies `resume`); `adopt_config`: resume a run without config files whose checkpoint recorded
        none, taking `cfg` as its own; `show_progress` a function: a line to it every 30 s (logging.Progress)."""
        self.cfg, self.log, self.show_progress, self.adopt_config = cfg, log, show_progress, adopt_config
        self.run_dir = cfg.run_dir
        check_writable(self.run_dir, "the folder of a pretraining run")  # first: it is looked into below
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        data_root = run_data(cfg)  # a missing one blamed on what set it
        self.train_data = PackedDataset(data_root, "train")
        self.val_data = PackedDataset(data_root, "validation")
        self.data_fingerprint = packing.fingerprint(self.train_data.meta)
        tok = self.train_data.meta["tokenizer"]
        self.vocab = vocab_of(tok)
        self.model_cfg = model_config(cfg, tok)
        self.phases = cfg.phases
        self.world, self.device = distributed.init(cfg.train.parallel, resolve_device(cfg.train.device))
        distributed.check_same_config(self.world, self.device,
                                      {**cfg.model_dump(mode="json"), "packed data": self.data_fingerprint})
        if not self.world.is_main:  # one voice per run: rank 0 logs and shows progress
            self.log, self.show_progress = (lambda message: None), False
        source_notes = check_source(cfg, self.model_cfg, data_root)  # first: another tokenizer explains the rest
        source_notes += [note] if (note := cfg.schedule_note()) else []
        check_compatible(cfg, self.model_cfg, self.train_data.meta, self.phases, self.world.size)
        with distributed.follow_main(self.world):  # a resume that is not this run: refused before the model is built
            self._check_run_dir(True, extend) if resume or extend else None
        self.global_batch = cfg.train.sequences_per_step(self.train_data.seq_len)
        self.module = initial_model(cfg, self.model_cfg, attention.for_pretraining(  # one backend for the whole run
            cfg.train.attention, self.device, self.train_data.seq_len, distributed.compile_kernel),
            log=self.log, data_meta=self.train_data.meta)
        self.module.to(self.device)
        # What trains: the module itself, or its DDP wrapper; FSDP2 shards the module in place.
        self.model = distributed.prepare_model(self.module, cfg.train, self.world, self.device)
        self.optimizer = optim.build_adamw(self.model.parameters(), cfg.optim, cfg.optim.lr,
                                           decay_all=cfg.optim.decay == "all")
        self.loader = PackedLoader(self.train_data, self.global_batch, seed=cfg.data.seed, rank=self.world.rank,
                                   world_size=self.world.size)
        self.step = 0
        # Each objective's step statistics since the last log line; checkpoints keep them (a resume logs the same)
        self.window: dict[str, list[dict[str, torch.Tensor]]] = {}
        self._said: set[str] = set()  # the notes said once per run
        self._lock = ExitStack()  # the run folder's lock (rank 0's): held from here to the end of run()
        created = not self.run_dir.exists()
        with distributed.follow_main(self.world):  # no rank writes into the run folder before rank 0 checked it
            try:
                self._prepare_run_dir(resume or extend, extend)
            except BaseException:
                self._lock.close()
                if created and self.world.is_main:
                    drop_if_only_lock(self.run_dir)  # a refused run leaves no folder behind
                raise
        if note := cfg.train.dtype_note(self.device):  # a run, not a refusal
            self.log(note)
        if note := packing.no_validation_note(self.val_data.meta):
            self.log(f"{data_root}: {note}")
        for note in source_notes:
            self.log(note)

    def _prepare_run_dir(self, resume: bool, extend: bool) -> None:
        # A resume was checked before the lock (in __init__, before the model is built), so that a refused one changes
        # no file (the lock file included); it is checked again under it: another process may have moved the run on.
        # A new run is checked under the lock only, so that a run being written is refused naming its process.
        if self.world.is_main:  # before anything is written there; the other ranks follow rank 0
            self._lock.enter_context(run_lock(self.run_dir, "a pretraining run"))
            if not resume and (cleared := same_run.clear_unsaved_start(self.run_dir)):
                self.log(f"{self.run_dir} held a start that saved no checkpoint ({', '.join(cleared)} removed): "
                         "nothing to resume from, so this run starts it again")
        found, extended = self._check_run_dir(resume, extend)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.world.is_main and (stale := checkpoint.clean_stale(self.run_dir)):
            self.log(f"removed what an interrupted run left in {self.run_dir / 'checkpoints'}: {', '.join(stale)}")
        if found is not None:
            self._load_full_state(found, "resume")
            if not (self.run_dir / checkpoint.LATEST).exists():
                self.log(f"{self.run_dir / checkpoint.LATEST} is missing: continuing from the newest complete "
                         f"checkpoint, {found.name}")
            self.log(f"{'extended' if extended else 'resumed'} {self.run_dir} from {found.name} (step {self.step})"
                     + (f" to {self.cfg.train.steps} steps" if extended else ""))
        elif self.cfg.init.branch_from:
            source = checkpoint.resolve(self.cfg.init.branch_from)
            self._load_full_state(source, "branch")
            self.log(f"branched from {source} at step {self.step}")
        elif self.cfg.init.from_weights:
            if (source := getattr(self.model_cfg, "source", None)) is None:  # else read by initial_model
                source = checkpoint.resolve(self.cfg.init.from_weights)
                distributed.load_weights(source, self.model)
            self.log(f"initialised weights from {source}")
        if self.world.is_main:
            same_run.record_config(self.cfg, self.step if extended else None)

    def _check_run_dir(self, resume: bool, extend: bool) -> tuple[Path | None, bool]:
        """(the checkpoint to resume from, whether it is an extension), once the folder is found to hold no run
        (a new one) or, with `resume`, this same run: read-only."""
        found = checkpoint.latest(self.run_dir) if self.run_dir.exists() else None
        if found is None and (orphan := checkpoint.newest_complete(self.run_dir)) is not None:
            # LATEST is missing (a kill before the first one was written, or a hand): never start again over the run
            found = orphan
        if not self.world.is_main:  # rank 0 checks (and writes config.yaml meanwhile); the others follow it
            return (found if resume else None), False
        if not resume:
            if found is not None or same_run.has_run(self.run_dir):
                last = f" (last checkpoint {found.name})" if found else ""
                raise EncoderlabError(f"{self.run_dir} already holds a run{last}: pass {option('resume')} to continue "
                                      f"it or choose another name ({option('set', 'name=...')})")
            return None, False
        if extend and found is None:
            raise EncoderlabError(f"cannot extend {self.run_dir}: it has no checkpoint to continue from")
        state = checkpoint.load_state(found) if found is not None else None
        return found, same_run.check_same_run(self.cfg, state, self.data_fingerprint, extend, found,
                                              self.adopt_config)

    def _load_full_state(self, path: Path, why: str) -> None:
        state = checkpoint.load_state(path)
        same_run.check_continues(self.cfg, state, path, why, self.global_batch)
        distributed.load_checkpoint(path, self.model, self.optimizer)
        self.loader.load_state_dict(state["data"])
        self.step = state["step"]
        if why == "resume":  # a branch is another run: its log lines start with its own steps
            self.window = window_from_state(state.get("log_window", {}), self.device)

    # ------------------------------------------------------------------------------------------- one step

    def _generator(self, step: int, skip_rows: int = 0) -> torch.Generator:
        # Masks depend on (seed, step) only, so resuming reproduces them without saving RNG state.
        gen = torch.Generator(self.device).manual_seed(derive_seed(STEP_DRAWS, self.cfg.train.seed, step))
        return objectives.skip_mask_draws(gen, skip_rows, self.train_data.seq_len)

    def train_step(self, objective) -> dict[str, torch.Tensor]:
        batch = self.loader.next_batch()  # this rank's slice of the global batch
        local_batch = batch.input_ids.shape[0]
        micro = self.cfg.train.micro_batch or local_batch
        gen = self._generator(self.step, skip_rows=self.world.rank * local_batch)
        if getattr(self.module, "dropout", 0):
            # A transformers model's dropout draws from the global generators: seeded from (seed, step, rank) as the
            # masks are, so that a resumed run drops what an uninterrupted one would.
            torch.manual_seed(derive_seed("dropout", self.cfg.train.seed, self.step, self.world.rank))
        # Accumulated on the device: nothing here waits for the accelerator (logging reads them every N steps).
        total_tokens = torch.zeros((), dtype=torch.int64, device=self.device)
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device)
        self.model.train()
        input_ids, doc_ids = (self._to_device(t) for t in (batch.input_ids, batch.doc_ids))
        micro_batches = list(zip(input_ids.split(micro), doc_ids.split(micro)))
        for i, (ids, docs) in enumerate(micro_batches):
            with distributed.grad_sync(self.model, last_micro_batch=i == len(micro_batches) - 1):
                with optim.autocast(self.cfg.train.dtype, self.device):
                    sums = objectives.loss_sums(self.model, ids, docs, objective, self.vocab, gen)
                # Sum of per-token losses here; divided by the step's token count below, so the gradient is the
                # exact token-weighted mean however the batch is split into micro-batches and ranks.
                sums.loss.backward()
            total_tokens += sums.tokens
            loss_sum += sums.loss.detach()
            correct += sums.correct
        total_tokens, loss_sum, correct = distributed.sum_over_ranks(self.world, total_tokens, loss_sum, correct)
        denom = total_tokens.clamp_min(1).float()
        # DDP and FSDP2 average gradients over ranks: dividing by tokens / ranks makes that the sum over all tokens.
        grad_denom = denom / self.world.size
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.div_(grad_denom)
        grad_norm = distributed.clip_grad_norm(self.model, optim.max_grad_norm(self.cfg.optim.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": loss_sum / denom, "accuracy": correct / denom, "grad_norm": grad_norm,
                "predicted_tokens": total_tokens}

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":  # page-locked, so that the copy does not make the host wait
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    @torch.no_grad()
    def evaluate(self, objective) -> dict[str, float]:
        """Held-out loss on a fixed set of validation windows with fixed masks: comparable across steps.

        Every rank evaluates an equal, contiguous share of the windows (FSDP2 needs every rank in every forward)
        with the masks a single process would draw there, and the sums are added over ranks."""
        share = min(len(self.val_data), self.cfg.train.eval_batches * self.global_batch) // self.world.size
        if share == 0:
            return {}
        self.module.eval()
        first = self.world.rank * share
        # The same masks for every run and step, whatever its seed: validation losses compare across runs.
        gen = torch.Generator(self.device).manual_seed(derive_seed("validation-masks"))
        gen = objectives.skip_mask_draws(gen, first, self.val_data.seq_len)
        total = torch.zeros((), dtype=torch.int64, device=self.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        micro = self.cfg.train.micro_batch or self.global_batch // self.world.size
        for start in range(first, first + share, micro):
            ids, docs = (torch.from_numpy(a).to(self.device)
                         for a in self.val_data.windows(list(range(start, min(first + share, start + micro)))))
            with optim.autocast(self.cfg.train.dtype, self.device):
                sums = objectives.loss_sums(self.module, ids, docs, objective, self.vocab, gen)
            total += sums.tokens
            loss_sum += sums.loss.double()
        total, loss_sum = distributed.sum_over_ranks(self.world, total, loss_sum)
        if not int(total):  # the fixed masks selected no validation token: there is no loss to report
            self._say_once(f"val/loss_{objective.name}: the validation masks select no token of the "
                           f"{share * self.world.size} windows evaluated, so no validation loss is logged")
            return {}
        return {f"val/loss_{objective.name}": float(loss_sum / total)}

    # ------------------------------------------------------------------------------------------- the run

    def _save(self, reason: str, phase, watch: Watch) -> None:
        watch.check_weights(self.model, self.step)  # a diverged run never saves, so never prunes
        state = {"reason": reason, "phase": phase.index, "objective": phase.objective.name,
                 "schedule": self.cfg.objective.text,
                 "data": self.loader.state_dict(), "lr_factor": self._lr_factor(self.step),
                 "total_steps": self.cfg.train.steps, "data_fingerprint": self.data_fingerprint,
                 "config": self.cfg.model_dump(mode="json"),  # the run's definition, should config.yaml be lost
                 "log_window": window_state(self.window)}
        path = distributed.save_checkpoint(self.run_dir, self.step, self.model, self.optimizer, state,
                                           tokenizer_dir=self.train_data.root / "tokenizer", world=self.world)
        if self.world.is_main:
            checkpoint.prune(self.run_dir, self.cfg.train.keep_checkpoints)
        self.log(f"checkpoint ({reason}) -> {path}")

    def _save_reason(self, decay_start: int | None) -> str | None:
        """Why the state after `self.step` steps is saved, if it is: one checkpoint per step at most."""
        step, train = self.step, self.cfg.train
        if step == train.steps:
            return "final"
        if any(p.start == step for p in self.phases[1:]):
            return "phase"  # the state in which the next objective begins
        if decay_start and step == decay_start:
            return "stable"  # the last state before decay: where branches leave the trunk
        if step in train.save_at:
            return "requested"
        if train.save_every and step % train.save_every == 0:
            return "periodic"
        return None

    def _record(self, window: dict[str, list[dict]], phase, tokens_per_s: float) -> dict | None:
        """This step's line of metrics.jsonl, if it has one: the training means over `window` every `log_every`
        steps, held-out losses every `eval_every` steps (alone on a step that logs no training line), both at the
        last step."""
        train, step = self.cfg.train, self.step
        logs = step % train.log_every == 0 or step == train.steps
        evaluates = (train.eval_every and step % train.eval_every == 0) or step == train.steps
        if not (logs or evaluates):
            return None
        tokens = step * self.global_batch * self.train_data.seq_len
        record = {"step": step, "phase": phase.objective.name, "tokens": tokens}
        if logs:
            record = {**self._means(window), "step": step, "phase": phase.objective.name,
                      "lr": self.optimizer.param_groups[0]["lr"], "tokens": tokens, "tokens_per_s": tokens_per_s}
        for member in phase.members if evaluates else ():
            record.update(self.evaluate(member))
        return record

    def _means(self, window: dict[str, list[dict]]) -> dict[str, float]:
        """Each objective's numbers over the steps since the last log line. A step that predicted no token (an MLM
        draw that masked nothing: short documents, a low rate) has no loss: its 0 is left out of the loss, accuracy
        and gradient-norm means, so out of the summary and of train.loss_spike's lowest loss too."""
        record: dict[str, float] = {}
        for name, steps in window.items():
            tokens = torch.stack([s["predicted_tokens"] for s in steps]).float()
            counted = tokens > 0
            if not counted.all():
                self._say_once(f"{name}: a step predicted no token (its masks selected none: short documents or "
                               "a low rate); such steps are left out of the logged loss, accuracy and gradient-norm "
                               "means and of train.loss_spike's baseline (said once)")
            for key in steps[0]:
                values = torch.stack([s[key] for s in steps]).float()
                if key == "predicted_tokens":
                    record[f"{name}/{key}"] = float(values.mean())
                elif counted.any():
                    record[f"{name}/{key}"] = float(values[counted].mean())
        return record

    def _say_once(self, note: str) -> None:
        if note not in self._said:
            self._said.add(note)
            self.log(note)

    def _lr_factor(self, step: int) -> float:
        return self.cfg.lr_schedule.factor(step, self.cfg.train.steps)

    def run(self, stop_at: int | None = None) -> dict:
        """Train to the end of the budget (tests: stop after step `stop_at`); the lock is released at the end."""
        with self._lock:
            try:
                return self._train(stop_at)
            except (MemoryError, RuntimeError) as exc:
                if not is_out_of_memory(exc):
                    raise
                local = self.global_batch // self.world.size
                raise out_of_memory(exc, self.run_dir, self.step + 1, self.cfg.train.micro_batch or local, local,
                                    self.train_data.seq_len, self.cfg.train.activation_checkpointing) from None

    def _train(self, stop_at: int | None) -> dict:
        cfg, total = self.cfg, self.cfg.train.steps
        decay_start = cfg.lr_schedule.decay_start(total)
        metrics = MetricsLog(self.run_dir, resume_from=self.step, tensorboard=cfg.train.tensorboard,
                             wandb=cfg.train.wandb, config=cfg.model_dump(mode="json"), enabled=self.world.is_main)
        progress = Progress("step", total, start=self.step, enabled=self.show_progress)
        watch = Watch(self.run_dir, self.world, cfg.train.loss_spike, resumed_at=self.step)
        tokens_per_step = self.global_batch * self.train_data.seq_len
        t_window, steps_in_window = time.perf_counter(), 0  # this session's steps: its throughput
        started = time.perf_counter()
        last: dict = {}
        try:
            while self.step < total:
                phase = objectives.phase_at(self.phases, self.step)
                optim.set_lr(self.optimizer, cfg.optim.lr * self._lr_factor(self.step))
                objective = phase.objective_at(self.step, cfg.train.seed)
                stats = self.train_step(objective)
                self.step += 1
                steps_in_window += 1
                watch.add(self.step, stats)
                self.window.setdefault(objective.name, []).append(stats)
                record = self._record(self.window, phase, steps_in_window * tokens_per_step / max(
                    time.perf_counter() - t_window, 1e-9))
                if record is not None:
                    metrics.write(record)  # the diverging line too: the log shows what stopped the run
                    watch.check_record(record)
                    last = record
                if record is not None and "lr" in record:  # a training line, not held-out losses alone
                    self.window, t_window, steps_in_window = {}, time.perf_counter(), 0
                    progress.update(self.step, describe_step(record))
                else:  # between log lines: a line when none was said for 30 s
                    progress.beat(self.step)
                reason = self._save_reason(decay_start)
                if reason:
                    self._save(reason, objectives.phase_at(self.phases, min(self.step, total - 1)), watch)
                if stop_at is not None and self.step >= stop_at:
                    return {"stopped_at": self.step}
        finally:
            progress.close()
            metrics.close()
        if not last:  # resumed when already finished: its final record is the one logged before
            self.log(f"{self.run_dir} had already trained its {total} steps")
            last = (read_metrics(self.run_dir / "metrics.jsonl")[-1:] or [{}])[0]
        seconds = round(time.perf_counter() - started, 1)
        summary = {"run_dir": str(self.run_dir), "steps": total, "tokens": total * tokens_per_step,
                   "parameters": self.model_cfg.num_parameters(), "seconds_this_session": seconds, "final": last,
                   "checkpoint": str(checkpoint.latest(self.run_dir)), "metrics": str(self.run_dir / "metrics.jsonl")}
        if self.world.is_main:
            write_json(self.run_dir / "summary.json", summary)
        distributed.barrier(self.world)  # ranks exit together: a peer tearing gloo down early aborted rank 0 at exit
        return summary


def vocab_of(tok: dict) -> objectives.Vocab:
    """The objectives' view of the data's tokenizer: its size, mask id and the special ids never masked."""
    specials = {tok["bos_id"], tok["eos_id"], tok["pad_id"], tok["mask_id"]} - {None}
    return objectives.Vocab(tok["vocab_size"], tok["mask_id"], tuple(sorted(specials)))


def window_state(window: dict[str, list[dict[str, torch.Tensor]]]) -> dict:
    """The log window as JSON: each statistic's value and dtype (an fp32 value is exact as a Python float)."""
    return {name: [{key: [value.item(), str(value.dtype).removeprefix("torch.")] for key, value in stats.items()}
                   for stats in steps] for name, steps in window.items()}


def window_from_state(saved: dict, device: torch.device) -> dict[str, list[dict[str, torch.Tensor]]]:
    return {name: [{key: torch.tensor(value, dtype=getattr(torch, dtype), device=device)
                    for key, (value, dtype) in stats.items()} for stats in steps] for name, steps in saved.items()}

