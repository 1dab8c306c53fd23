"""Files and processes under faults, for real: outputs get the umask's permissions, a disk that fills up during a
checkpoint or a record is one line naming the path and leaves no temporary, a crafted LATEST leads nowhere, and a
sweep's workers die with their parent.

A full disk is simulated with a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored): every write past it fails with
EFBIG, in Python, in safetensors and inside torch.save, as ENOSPC would, without filling a disk.
"""
from __future__ import annotations

import contextlib
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import records
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

LIMIT = 16_000  # bytes: more than config.yaml and a metrics line, less than the micro model's weights


def micro_run(packed: Path, out_dir: Path, name: str = "run") -> dict:
    return {"name": name, "out_dir": str(out_dir), "data": {"path": str(packed)},
            "model": {"preset": "micro", "num_hidden_layers": 1}, "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
            "train": {"steps": 2, "global_batch": 2, "dtype": "fp32", "tensorboard": False}}


def train(packed: Path, out_dir: Path) -> Path:
    Trainer(validate(PretrainConfig, micro_run(packed, out_dir), "test"), show_progress=False,
            log=lambda message: None).run()
    return out_dir / "run"


@pytest.fixture(scope="module")
def run(tmp_path_factory, packed_dir) -> Path:
    return train(packed_dir, tmp_path_factory.mktemp("runs"))


def limited(limit: int):
    """What a new process runs first so that every file it writes stops at `limit` bytes."""
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), it does not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def cli(*args: str, env: dict | None = None, limit: int | None = None) -> subprocess.Popen:
    """`encoderlab ARGS` in a new process; with `limit`, every file it writes stops at that many bytes."""
    return subprocess.Popen([sys.executable, "-m", "encoderlab.cli", *args], env={
        **os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "400", **(env or {})},
        preexec_fn=limited(limit) if limit else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoints_and_exports_get_the_umask_permissions(tmp_path, packed_dir, umask):
    from encoderlab.hub.exporter import export_checkpoint

    before = os.umask(umask)
    try:
        run = train(packed_dir, tmp_path / "runs")  # weights (safetensors), optimizer (DCP), tokenizer, logs
        export_checkpoint(run, tmp_path / "hf", "eurobert")
    finally:
        os.umask(before)
    paths = [p for p in tmp_path.rglob("*") if p.name != ".lock"]
    assert (run / "checkpoints" / "step-0000002" / "dcp").is_dir() and (tmp_path / "hf" / "config.json").exists()
    wrong = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in paths
             if stat.S_IMODE(p.stat().st_mode) != (0o777 if p.is_dir() else 0o666) & ~umask}
    assert not wrong


def test_a_disk_full_during_a_checkpoint_is_one_line_and_leaves_no_temporary(tmp_path, packed_dir):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(micro_run(packed_dir, tmp_path / "runs")))
    process = cli("pretrain", str(tmp_path / "run.yaml"), limit=LIMIT)
    _, stderr = process.communicate(timeout=300)
    folder = tmp_path / "runs" / "run" / "checkpoints"
    assert process.returncode == 1, stderr  # work had started: a failure, not a refusal
    assert stderr.strip().splitlines()[-1].startswith(f"error: cannot write {folder}/step-0000001: "), stderr
    assert "Traceback" not in stderr
    assert not list(folder.iterdir()) and not (folder.parent / "LATEST").exists()  # nothing half-written


def test_a_disk_full_during_data_prepare_is_one_line_and_leaves_nothing(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(f'{{"text": "{" ".join(f"word{j % 97}" for j in range(i % 50 + 100))}"}}\n'
                              for i in range(300)))  # about 250 KB: the corpus copy passes the limit at once
    out = tmp_path / "prepared"
    process = cli("data", "prepare", str(source), "--out", str(out), env={"ENCODERLAB_HOME": str(tmp_path / "h")},
                  limit=LIMIT)
    _, stderr = process.communicate(timeout=300)
    last = stderr.strip().splitlines()[-1]
    assert process.returncode == 1 and "Traceback" not in stderr, stderr
    assert last.startswith(f"error: cannot write {out}/") and last.endswith("File too large; nothing was written there")
    assert not out.exists() or not any(out.iterdir())  # no half-prepared data, no temporary folder


def test_a_disk_full_during_a_record_is_one_line_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "evals" / "tag" / "key" / "task" / "lr0.001-seed0.json"
    script = (f"from pathlib import Path; from encoderlab.finetuning import records\n"
              f"records.write(Path({str(path)!r}), {{'curve': [0.123456789] * 5000}})\n")
    process = subprocess.Popen([sys.executable, "-c", script], preexec_fn=limited(4096), stderr=subprocess.PIPE,
                               text=True)
    _, stderr = process.communicate(timeout=120)
    assert f"WriteFailed: cannot write {path}: File too large; nothing was written there" in stderr
    assert list(path.parent.iterdir()) == []


def test_a_crafted_latest_is_refused_and_never_followed(tmp_path, run):
    copy = tmp_path / "run"
    (copy / "checkpoints").mkdir(parents=True)
    os.symlink(run / "checkpoints" / "step-0000002", copy / "checkpoints" / "step-0000002")
    outside = tmp_path / "outside"
    (outside / "checkpoints").mkdir(parents=True)
    (outside / "state.json").write_text("{}")  # what a followed ../../outside would find
    for crafted in ("../../outside", "/etc", "step-2", "step-0000002/../../../outside"):
        (copy / "LATEST").write_text(crafted + "\n")
        with pytest.raises(EncoderlabError, match=rf"names '{crafted}', which is not a checkpoint of this run.*"
                                                  r"step-0000002 is an older complete checkpoint"):
            checkpoint.resolve(copy)
    (copy / "LATEST").write_text("step-0000002\n")
    assert checkpoint.resolve(copy) == copy / "checkpoints" / "step-0000002"


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
        except (OSError, IndexError, ValueError):  # it ended while being read
            pass
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_sweeps_workers_and_resource_tracker_end_when_its_parent_is_killed(tmp_path, run, classification_task):
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({  # runs far longer than the test waits
        "name": "long", "max_steps": 100000, "epochs": 10000, "batch_size": 4, "lrs": [1e-3, 2e-3], "seeds": [0],
        "max_length": 16, "dtype": "fp32"}))
    process = cli("sweep", str(run), str(classification_task(tmp_path)), "--protocol", str(tmp_path / "protocol.yaml"),
                  "--out", str(tmp_path / "evals"), "--engine", "sequential", "--workers", "2",
                  env={"ENCODERLAB_HOME": str(tmp_path / "home")})
    assert_workers_end_with(process)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_killed_sweep_worker_ends_the_sweep_in_one_line_and_keeps_the_finished_runs(tmp_path, run,
                                                                                       classification_task):
    """It used to end in BrokenProcessPool's traceback."""
    tasks = [classification_task(tmp_path / name) for name in ("short", "long")]
    for task in tasks:
        task.write_text(task.read_text() + f"name: {task.parent.name}\n")
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({  # the long run outlasts the test; the short one ends
        "name": "p", "max_steps": 2, "batch_size": 4, "lrs": [1e-3], "seeds": [0], "max_length": 16, "dtype": "fp32",
        "task_overrides": {"long": {"max_steps": 100000, "epochs": 10000}}}))
    process = cli("sweep", str(run), *map(str, tasks), "--protocol", str(tmp_path / "protocol.yaml"), "--out",
                  str(tmp_path / "evals"), "--engine", "sequential", "--workers", "2",
                  env={"ENCODERLAB_HOME": str(tmp_path / "home")})
    spawned: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob("evals/*/*/short/*/lr*.json")) and process.poll() is None:
            assert time.monotonic() < deadline, "the short run never finished"
            time.sleep(0.5)
        spawned = children(process.pid)
        worker = min(pid for pid in spawned if b"spawn_main" in (Path("/proc") / str(pid) / "cmdline").read_bytes())
        os.kill(worker, signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
    finally:
        for pid in spawned | {process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert process.returncode == 1 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"error: a fine-tuning worker process died (pid {worker}, killed by SIGKILL): killed by hand (kill -9) or by "
        "the system's out-of-memory killer; the sweep stopped. The 1 run(s) finished before are recorded, and running "
        "the sweep again resumes from them (if memory ran out: fewer --workers, or a smaller batch_size or max_length "
        "in the protocol)")
    (kept,) = tmp_path.glob("evals/*/*/short/*/lr*.json")
    assert records.usable(kept, checkpoint.weights_digest(checkpoint.resolve(run)))[0]["status"] == "ok"
    assert not list(tmp_path.glob("evals/*/*/long/*/lr*.json"))


def assert_workers_end_with(process: subprocess.Popen) -> None:
    """Once `process` runs two pool workers (and the resource tracker), kill -9 it: none of them may outlive it."""
    spawned: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while len(spawned := children(process.pid)) < 3 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # two workers and the resource tracker
        assert len(spawned) >= 3, process.communicate()[1]
        time.sleep(2)  # the workers receive their work
        process.kill()
        process.wait()
        deadline = time.monotonic() + 60  # they end at once; the margin is for a loaded machine
        while any(alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in spawned if alive(pid)]
    finally:
        for pid in spawned | {process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_studys_workers_end_when_it_is_killed(tmp_path, packed_dir, classification_task):
    """Orphaned study workers once went on pretraining into a study folder that a new run was using."""
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({  # pretraining runs far longer than the test waits
        "data": {"path": str(packed_dir)}, "model": {"preset": "micro", "num_hidden_layers": 1},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"global_batch": 2, "dtype": "fp32", "tensorboard": False, "save_every": 100000}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({"name": "p", "lrs": [1e-3], "seeds": [0]}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 100000,
        "models": [{"sizes": ["micro"], "objectives": ["clm", "mlm40"]}],
        "evaluation": {"protocol": "protocol.yaml", "tasks": [str(classification_task(tmp_path))]}}))
    assert_workers_end_with(cli("study", "run", str(tmp_path / "study.yaml"), "--workers", "2",
                                env={"ENCODERLAB_HOME": str(tmp_path / "home")}))
