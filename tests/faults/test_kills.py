"""kill -9 anywhere in a pretraining run, then --resume: the run ends with the weights (bitwise), the logged losses and
the checkpoints of a run never interrupted, and no leftover of the killed writes.

Each run is a child forked by tests/faults/killer.py that SIGKILLs itself at a chosen I/O event: while LATEST moves,
while old checkpoints are pruned, between a checkpoint's rename and LATEST's move, mid-way through the weights file
or a metrics line, and again inside the resume that follows (a second kill while it cleans up or rewrites). A few
more points are drawn at random (seeded) from all the I/O events of a run, and two kills land at random (seeded)
times wherever the run is then. A second writer is refused while the first one lives and takes over once it is
killed.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from runs import STEPS, config
from safetensors.torch import load_file

from encoderlab.core.errors import EncoderlabError
from encoderlab.runs import checkpoint

KILLER = Path(__file__).with_name("killer.py")


class Server:
    """The fork server: one job at a time."""

    def __init__(self, out: Path, packed: Path):
        self.out, self.packed = out, packed
        self.proc = subprocess.Popen([sys.executable, str(KILLER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def send(self, name: str, resume: bool, kill: dict | None = None, **extra) -> None:
        job = {"config": config(self.out, self.packed, name), "resume": resume, "kill": kill, **extra}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        return json.loads(self.proc.stdout.readline())

    def run(self, name: str, resume: bool, kill: dict | None = None, **extra) -> dict:
        self.send(name, resume, kill, **extra)
        return self.answer()


@pytest.fixture(scope="module")
def server(tmp_path_factory, packed_dir):
    server = Server(tmp_path_factory.mktemp("kills"), packed_dir)
    yield server
    server.proc.stdin.close()
    server.proc.wait(timeout=120)


@pytest.fixture(scope="module")
def reference(server):
    """The uninterrupted run, and the labels of its I/O events in order."""
    events = server.out / "events.json"
    assert server.run("reference", resume=False, events=str(events))["code"] == 0
    return server.out / "reference", json.loads(events.read_text())


def metrics(run: Path) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records]  # a timing, not a result


def assert_same_run(run: Path, reference: Path) -> None:
    final = checkpoint.checkpoint_name(STEPS)
    a, b = (load_file(str(r / "checkpoints" / final / checkpoint.WEIGHTS)) for r in (reference, run))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    assert metrics(run) == metrics(reference)  # every step logged once, with the same losses
    assert checkpoint.latest(run).name == final
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (reference / "checkpoints").iterdir()), "pruning went otherwise"
    for name in names:
        checkpoint.verify(run / "checkpoints" / name)
    leftovers = [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    assert leftovers == [], "temporary files of killed writes were left in the run folder"


def kill_and_resume(server, reference, name: str, kills: list[dict]) -> None:
    """Run `name`, killed at kills[0]; resume it, killed at kills[1], ...; resume it to the end: the same run."""
    for i, kill in enumerate(kills):
        answer = server.run(name, resume=i > 0, kill=kill)
        assert answer["signal"] == signal.SIGKILL, f"job {i} never reached its kill point {kill}: {answer}"
    assert server.run(name, resume=True)["code"] == 0
    assert_same_run(server.out / name, reference[0])


def point(at: str, nth: int, when: str) -> dict:
    return {"at": at, "nth": nth, "when": when}


# Each case: the kill of the first run, then the kills of the resumes that follow (counted within each job).
TARGETED = {
    "while-LATEST-moves": [point("replace:LATEST", 3, "before"), point("replace:LATEST", 2, "after")],
    "pruning-renamed-then-cleanup-half-done": [point("replace:.step-", 1, "after"), point("rmtree:.step-", 1, "mid")],
    "torn-metrics-line-then-pruning-half-done": [point("metrics", 4, "mid"), point("rmtree:.step-", 1, "mid")],
    "renamed-before-LATEST-then-its-rewrite": [point("replace:step-", 5, "after"), point("replace:.step-", 1, "after")],
    "complete-not-renamed-then-half-weights": [point("replace:step-", 3, "before"), point("weights", 2, "mid")],
    "optimizer-only-then-metrics-rewrite": [point("optimizer", 2, "after"),
                                            point("replace:metrics.jsonl", 1, "before")],
}


@pytest.mark.parametrize("name", TARGETED)
def test_kill_at_a_chosen_point_then_resume_gives_the_same_run(server, reference, name):
    kill_and_resume(server, reference, name, TARGETED[name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_at_a_random_point_then_resume_gives_the_same_run(server, reference, seed):
    events = reference[1]
    rng = random.Random(seed)
    index = rng.randrange(1, len(events) + 1)
    kill_and_resume(server, reference, f"random-{seed}", [{"index": index, "when": rng.choice(["before", "after"])}])


@pytest.mark.parametrize("seed", [0, 1])
def test_kill_at_a_random_time_then_resume_gives_the_same_run(server, reference, seed):
    """Wherever the kill lands (it may land after the end: then the resume has nothing to do)."""
    name = f"timed-{seed}"
    server.run(name, resume=False, kill_after=random.Random(seed).uniform(0.05, 0.6))
    assert server.run(name, resume=True)["code"] == 0
    assert_same_run(server.out / name, reference[0])


def test_a_second_writer_is_refused_until_the_first_is_killed(server, reference, packed_dir):
    from encoderlab.core.config import validate
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    held = server.out / "held-pid"
    server.send("two-writers", resume=False, kill=point("replace:.step-", 1, "after"), hold=str(held))
    deadline = time.monotonic() + 300
    while not held.exists() or not held.read_text():  # the first writer waits inside its first pruning
        assert time.monotonic() < deadline, "the first writer never reached its pruning"
        time.sleep(0.05)
    pid = int(held.read_text())
    try:
        cfg = validate(PretrainConfig, config(server.out, packed_dir, "two-writers"), "test")
        with pytest.raises(EncoderlabError) as refused:
            Trainer(cfg, resume=True, show_progress=False, log=lambda message: None)
        assert f"process {pid} on " in str(refused.value) and "\n" not in str(refused.value)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert server.answer()["signal"] == signal.SIGKILL
    assert server.run("two-writers", resume=True)["code"] == 0  # the lock of the killed writer is taken over
    assert_same_run(server.out / "two-writers", reference[0])
