"""Where a run reports: a JSON Lines log (the record of truth), scalar sinks beside it (TensorBoard, Weights &
Biases) and a live progress line."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import atomic_file
from encoderlab.runs.config import WandbSection


def read_metrics(path: Path) -> list[dict]:
    """The records of a run's metrics.jsonl (none if it has none yet). A last line cut short by a kill is dropped:
    its step is redone on resume. A damaged earlier line is refused: that is not a cut, and no number of the run's
    can be trusted past it."""
    if not path.exists():
        return []
    # Decoded line by line: bytes that are not UTF-8 (a torn write, a disk error) damage one line, not the file.
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    records = []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if n == len(lines):
                break
            raise EncoderlabError(f"{path}: record {n} is not JSON (the file is damaged, not just cut short): "
                                  "restore it or move it away") from None
    return records


class TensorBoard:
    """Scalars under `folder`; a resumed run's events after `purge_step` are dropped (their steps are redone)."""

    def __init__(self, folder: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder), purge_step=purge_step)

    def log(self, scalars: dict[str, float], step: int | None = None) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


def require_wandb(settings: WandbSection | None, where: str) -> None:
    """Refuse, before any work, a config that asks for W&B logging where wandb is not installed."""
    if settings is None:
        return
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise EncoderlabError(f"{where}: {{project: {settings.project}}} asks for Weights & Biases logging, but wandb "
                              "is not installed: pip install 'encoderlab[wandb]', or remove the setting") from None


class Wandb:
    """A W&B run whose files go to `folder`/wandb (offline mode keeps them there for `wandb sync`). Our own console
    output is not captured (console="off"): it goes to the terminal and --json's stdout untouched."""

    def __init__(self, settings: WandbSection, folder: Path, name: str, config: dict):
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=settings.project, name=settings.name or name, mode=settings.mode,
                              dir=str(folder), config=config, settings=wandb.Settings(console="off"))

    def log(self, scalars: dict[str, float], step: int | None = None) -> None:
        self.run.log(scalars, step=step)

    def summarize(self, values: dict[str, float]) -> None:
        self.run.summary.update(values)

    def close(self) -> None:
        self.run.finish()


class MetricsLog:
    """Disabled on every rank but 0 of a distributed run: records are global, one writer is enough. Each record's
    numbers also go, at its step, to the sinks the config asks for (TensorBoard, W&B with the run's config)."""

    def __init__(self, run_dir: Path, *, resume_from: int, tensorboard: bool, wandb: WandbSection | None = None,
                 config: dict | None = None, enabled: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self.file, self.sinks = None, []
        if not enabled:
            return
        self._truncate_after(resume_from)
        self.file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            self.sinks.append(TensorBoard(run_dir / "tensorboard", purge_step=resume_from or None))
        if wandb is not None:
            self.sinks.append(Wandb(wandb, run_dir, run_dir.name, config or {}))

    def _truncate_after(self, step: int) -> None:
        """Records after the checkpoint a run resumes from were made by steps that will be redone."""
        if not self.path.exists():
            return
        keep = [json.dumps(record) + "\n" for record in read_metrics(self.path) if record["step"] <= step]
        with atomic_file(self.path) as tmp:
            tmp.write_text("".join(keep))

    def write(self, record: dict) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        for sink in self.sinks:
            sink.log(scalars, record["step"])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for sink in self.sinks:
            sink.close()


# How often a long job says how it goes when no live bar shows it: pretraining, every sweep engine.
HEARTBEAT_S = 30.0


class Beat:
    """When a line is due: `every` seconds after the last one said, by `clock` (tests give a fake one). Pretraining's
    progress and the sweeps' heartbeat (finetuning/heartbeat.py) both keep time with it."""

    def __init__(self, every: float = HEARTBEAT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.last = clock()

    def due(self) -> float | None:
        """The time now when a line is due (the line is then taken as said), else None."""
        now = self.clock()
        if now - self.last < self.every:
            return None
        self.last = now
        return now


class Progress:
    """`unit done/total`, what is going on and the ETA on stderr: a live bar on a terminal, one line per update
    otherwise (CI logs, `make demo > log`); silent when disabled (tests, --json). Pretraining steps and sweep runs."""

    def __init__(self, unit: str, total: int, *, start: int = 0, enabled: bool | Callable[[str], None] = True,
                 clock: Callable[[], float] = time.monotonic):
        """`enabled` a function: lines go to it instead, at most one every `HEARTBEAT_S` (a study's jobs)."""
        self.unit, self.total, self.start = unit, total, start
        self.enabled = bool(enabled) and total > start
        self.say = enabled if callable(enabled) else None
        self.every_s, self.last = (HEARTBEAT_S if self.say else 0.0), -math.inf
        self.console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
        self.clock, self.t0 = clock, clock()
        self.pulse = Beat(clock=clock)  # a line between updates (`beat`) when none was said for HEARTBEAT_S
        self.bar = None
        if self.enabled and self.say is None and self.console.is_terminal:
            columns = (TextColumn(unit), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                       TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
            self.bar = RichProgress(*columns, console=self.console)
            self.bar.start()
            self.task = self.bar.add_task("", total=total, completed=start)

    def update(self, done: int, what: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=what)
            return
        now = self.clock()
        if now - self.last < self.every_s and done < self.total:
            return
        self.last = self.pulse.last = now
        (self.say or self.console.print)(f"{self.unit} {done}/{self.total}  {what}  eta {self._eta(now, done)}")

    def beat(self, done: int) -> None:
        """Asked every step: with no live bar, a line when none was said for `HEARTBEAT_S`, so that a run whose
        updates are minutes apart (pretraining logs every `log_every` steps) never looks dead."""
        if not self.enabled or self.bar is not None or done >= self.total or (now := self.pulse.due()) is None:
            return
        pace = (now - self.t0) / max(done - self.start, 1)
        (self.say or self.console.print)(f"{self.unit} {done}/{self.total}  {pace:.2f} s/{self.unit}  "
                                         f"eta {self._eta(now, done)}")

    def _eta(self, now: float, done: int) -> str:
        return f"{(now - self.t0) / max(done - self.start, 1) * (self.total - done) / 60:.1f} min"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def describe_step(record: dict) -> str:
    """A pretraining log record for the progress display: phase, loss (the mean over a mix's objectives), tokens/s
    and any validation losses."""
    losses = [v for k, v in record.items() if k.endswith("/loss") and not k.startswith("val/")]
    loss = f"{sum(losses) / len(losses):.3f}" if losses else "-"
    extra = "".join(f"  {k} {v:.3f}" for k, v in record.items() if k.startswith("val/"))
    return f"{record['phase']}  loss {loss}  {record['tokens_per_s']:,.0f} tok/s{extra}"
