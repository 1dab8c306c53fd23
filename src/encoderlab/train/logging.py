"""Where a run reports: a JSON Lines log (the record of truth), TensorBoard scalars, and a live progress line."""
from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from encoderlab.errors import EncoderlabError
from encoderlab.io import atomic_file


def read_metrics(path: Path) -> list[dict]:
    """The records of a run's metrics.jsonl (none if it has none yet). A last line cut short by a kill is dropped:
    its step is redone on resume. A damaged earlier line is refused: that is not a cut, and no number of the run's
    can be trusted past it."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise EncoderlabError(f"{path}: record {n} is not JSON (the file is damaged, not just cut short): "
                                  "restore it or move it away") from None
    return records


class MetricsLog:
    """Disabled on every rank but 0 of a distributed run: records are global, one writer is enough."""

    def __init__(self, run_dir: Path, *, resume_from: int, tensorboard: bool, enabled: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self.file, self.tb = None, None
        if not enabled:
            return
        self._truncate_after(resume_from)
        self.file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_from or None)

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
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.tb is not None:
            self.tb.close()


class Progress:
    """`unit done/total`, what is going on and the ETA on stderr: a live bar on a terminal, one line per update
    otherwise (CI logs, `make demo > log`); silent when disabled (tests, --json). Pretraining steps and sweep runs."""

    def __init__(self, unit: str, total: int, *, start: int = 0, enabled: bool = True):
        self.unit, self.total, self.start = unit, total, start
        self.enabled = enabled and total > start
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.t0 = time.perf_counter()
        self.bar = None
        if self.enabled and self.console.is_terminal:
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
        eta = (time.perf_counter() - self.t0) / max(done - self.start, 1) * (self.total - done)
        self.console.print(f"{self.unit} {done}/{self.total}  {what}  eta {eta / 60:.1f} min")

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
