"""A fork server for the fault tests: imports encoderlab once, then runs each job (one JSON line on stdin) in a
forked child that trains a run and, at the job's chosen point, kills itself with SIGKILL: no `finally`, no
`atexit`, no flush, as a kill -9 or a power cut would. The server answers one JSON line per job: how the child
ended (`signal` 9 for a kill) and its pid. It never computes anything itself, so forking it is safe.

A job: {"config": {...}, "resume": bool, "kill": point or null, "events": path or null, "hold": path or null,
"kill_after": seconds or null}
- point: {"at": label prefix, "nth": n, "when": "before" | "after" | "mid"}: the n-th I/O event (from 1) whose label
  starts with `at`; "mid" leaves the operation half done (a torn metrics line, a half-written weights file, a
  folder partly deleted). Or {"index": i, "when": ...}: the i-th event of any label (seeded random kills).
- events: write the labels of every I/O event of the job to this file (to pick random points from).
- hold: at the kill point, write the child's pid to this file and wait to be killed from outside instead.
- kill_after: the server kills the child this long after starting it (wherever it is then), if it still runs.
Labels: "replace:<name of the destination>", "rmtree:<name>", "weights", "optimizer", "metrics".
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  (imported lazily by a run's first steps: here once, not in every child)

from encoderlab.core.config import validate
from encoderlab.pretraining import distributed
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint
from encoderlab.runs.logging import MetricsLog


class Points:
    """Counts the I/O events of a job and dies at the chosen one."""

    def __init__(self, job: dict):
        self.kill, self.hold, self.labels, self.matched = job.get("kill"), job.get("hold"), [], 0

    def event(self, label: str, when: str) -> bool:
        """True when the job dies `when` (before, mid, after) this event; dies here itself for before and after."""
        k = self.kill
        if when == "before":
            self.labels.append(label)
            self.matched += bool(k and "at" in k and label.startswith(k["at"]))
        if not k or k["when"] != when:
            return False
        hit = len(self.labels) == k["index"] if "index" in k else label.startswith(k["at"]) and self.matched == k["nth"]
        if hit and when != "mid":
            self.die()
        return hit

    def die(self) -> None:
        if self.hold:
            Path(self.hold).write_text(str(os.getpid()))
            time.sleep(600)
        os.kill(os.getpid(), signal.SIGKILL)


def instrument(points: Points) -> None:
    """Wrap the operations through which a run writes and deletes (all of them: core/io.py, core/process.py,
    runs/checkpoint.py and pretraining/resume.py call os.replace and shutil.rmtree through their modules)."""
    real_replace, real_rmtree = os.replace, shutil.rmtree
    real_save_file, real_dcp_save, real_write = checkpoint.save_file, distributed.dcp.save, MetricsLog.write

    def replace(src, dst, **kw):
        points.event(f"replace:{Path(dst).name}", "before")
        real_replace(src, dst, **kw)
        points.event(f"replace:{Path(dst).name}", "after")

    def rmtree(path, *args, **kw):
        label = f"rmtree:{Path(path).name}"
        points.event(label, "before")
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        if files and points.event(label, "mid"):
            for p in files[: len(files) // 2 + 1]:
                p.unlink()
            points.die()
        real_rmtree(path, *args, **kw)
        points.event(label, "after")

    def save_file(tensors, filename, **kw):
        points.event("weights", "before")
        real_save_file(tensors, filename, **kw)
        if points.event("weights", "mid"):
            os.truncate(filename, os.path.getsize(filename) // 2)
            points.die()
        points.event("weights", "after")

    def dcp_save(*args, **kw):
        points.event("optimizer", "before")
        real_dcp_save(*args, **kw)
        points.event("optimizer", "after")

    def write(self, record):
        points.event("metrics", "before")
        if self.file is not None and points.event("metrics", "mid"):
            line = json.dumps(record) + "\n"
            self.file.write(line[: len(line) // 2])
            self.file.flush()
            points.die()
        real_write(self, record)
        points.event("metrics", "after")

    os.replace, shutil.rmtree = replace, rmtree
    checkpoint.save_file, distributed.dcp.save, MetricsLog.write = save_file, dcp_save, write


def child(job: dict) -> None:
    torch.set_num_threads(1)
    points = Points(job)
    instrument(points)
    cfg = validate(PretrainConfig, job["config"], "fault test")
    try:
        Trainer(cfg, resume=job["resume"], show_progress=False, log=lambda message: None).run()
    finally:
        if job.get("events"):
            Path(job["events"]).write_text(json.dumps(points.labels))


def wait(pid: int, kill_after: float | None) -> int:
    """The child's exit status; SIGKILLed first if it still runs `kill_after` seconds from now. Its pid cannot be
    reused before this reaps it, so the kill cannot hit another process."""
    deadline = None if kill_after is None else time.monotonic() + kill_after
    while deadline is not None and time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.005)
    if deadline is not None:
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def serve() -> None:
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(job)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
            os._exit(code)
        status = wait(pid, job.get("kill_after"))
        answer = {"pid": pid, "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                  "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
