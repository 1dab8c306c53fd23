"""One writer per output folder: a second process is refused naming the first; a killed holder's lock is taken over;
a pretraining run and a sweep hold theirs while they write."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import write_classification_task

from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.process import run_lock
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint as ckpt
from encoderlab.tasks import load_task

HOLD = ("import sys, time\nfrom pathlib import Path\nfrom encoderlab.core.process import run_lock\n"
        "with run_lock(Path(sys.argv[1]), 'a test'):\n    print('locked', flush=True)\n    time.sleep(600)\n")


@pytest.fixture
def holder():
    """Start a process that takes a folder's lock and keeps it until it is killed."""
    started = []

    def hold(folder) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "locked"
        return proc

    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_second_writer_is_refused_in_one_line_naming_the_first(tmp_path, holder):
    proc = holder(tmp_path / "out")
    with pytest.raises(EncoderlabError) as refused, run_lock(tmp_path / "out", "the records"):
        pytest.fail("two processes hold one lock")
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path / "out") in message and "the records" in message
    assert f"process {proc.pid} on " in message and f"(-c {tmp_path / 'out'})" in message  # its command line
    assert json.loads((tmp_path / "out" / ".lock").read_text())["pid"] == proc.pid  # the refusal changed nothing


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path, holder):
    proc = holder(tmp_path / "out")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((tmp_path / "out" / ".lock").read_text())["pid"] == proc.pid  # its name stays behind
    with run_lock(tmp_path / "out", "the records"):
        assert json.loads((tmp_path / "out" / ".lock").read_text())["pid"] == os.getpid()
    assert (tmp_path / "out" / ".lock").read_text() == ""  # released: it names nobody


def run_config(tmp_path, packed_dir, name="run", steps=2) -> PretrainConfig:
    return validate(PretrainConfig, {
        "name": name, "out_dir": str(tmp_path), "data": {"path": str(packed_dir)},
        "model": {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "num_key_value_heads": 1},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": steps, "global_batch": 4, "dtype": "fp32", "eval_batches": 1, "tensorboard": False}},
        "test")


def test_a_run_folder_in_use_is_refused_before_anything_is_written(tmp_path, packed_dir, holder):
    cfg = run_config(tmp_path, packed_dir)
    proc = holder(cfg.run_dir)
    with pytest.raises(EncoderlabError, match=f"a pretraining run into .*: process {proc.pid} on "):
        Trainer(cfg, show_progress=False)
    assert [p.name for p in cfg.run_dir.iterdir()] == [".lock"]


def test_a_trainer_holds_its_run_folder_until_run_ends_or_fails(tmp_path, packed_dir):
    cfg = run_config(tmp_path, packed_dir)
    trainer = Trainer(cfg, show_progress=False, log=lambda m: None)
    # flock: two opens of one file conflict even within one process
    with pytest.raises(EncoderlabError, match=f"process {os.getpid()} on "):
        Trainer(cfg, show_progress=False)
    trainer.run()
    with pytest.raises(EncoderlabError, match="already holds a run"):  # a refusal after the lock is taken...
        Trainer(cfg, show_progress=False)
    with run_lock(cfg.run_dir, "a test"):  # ...and both runs' locks are released
        pass


def test_a_sweep_holds_its_task_records(tmp_path, packed_dir, holder, classification_task):
    Trainer(run_config(tmp_path, packed_dir, name="tiny", steps=1), show_progress=False, log=lambda m: None).run()
    checkpoint = tmp_path / "tiny"
    spec = str(classification_task(tmp_path / "mytask"))
    protocol = Protocol(name="t", max_steps=1, batch_size=4, lrs=[1e-3], seeds=[0], max_length=16, dtype="fp32")
    out = tmp_path / "evals"
    key = records.protocol_key(protocol.model_dump(mode="json"))
    folder = out / records.checkpoint_tag(ckpt.resolve(checkpoint)) / key / load_task(spec).name
    proc = holder(folder)
    with pytest.raises(EncoderlabError, match=f"the .* records into .*: process {proc.pid} "):
        run_sweep(checkpoint, [spec], protocol, out, log=lambda m: None, show_progress=False, engine="sequential")
    assert records.load_all(out) == []
    proc.kill()
    proc.wait()
    summary = run_sweep(checkpoint, [spec], protocol, out, log=lambda m: None, show_progress=False,
                        engine="sequential")
    assert summary["tasks"][load_task(spec).name]["runs"] == 1 and len(records.load_all(out)) == 1


def test_two_sweeps_of_other_tasks_into_one_out_both_stay_in_its_summary(tmp_path, packed_dir, monkeypatch):
    """A study fine-tunes one checkpoint on two tasks side by side: each sweep rewrites the protocol folder's
    summary.json from the records it reads. The second one, ending while the first has read the records but not yet
    written, must not be overwritten by the first's older view (its task dropped from summary.json)."""
    import threading

    from encoderlab.finetuning.sweep import Sweep

    Trainer(run_config(tmp_path, packed_dir, name="tiny", steps=1), show_progress=False, log=lambda m: None).run()
    checkpoint = tmp_path / "tiny"
    protocol = Protocol(name="t", max_steps=1, batch_size=4, lrs=[1e-3], seeds=[0], max_length=16, dtype="fp32")
    out = tmp_path / "evals"
    specs = {}
    for name in ("first", "second"):
        task = write_classification_task(tmp_path / name)
        task.write_text(f"name: {name}\n" + task.read_text())
        specs[name] = str(task)
    second_summarizing, second_done = threading.Event(), threading.Event()
    real_summarize, real_write = Sweep.summarize, Sweep.write_summary

    def summarize(self, **kw):
        if threading.current_thread() is not threading.main_thread():
            second_summarizing.set()
        return real_summarize(self, **kw)

    def second_sweep():
        try:
            run_sweep(checkpoint, [specs["second"]], protocol, out, log=lambda m: None, show_progress=False,
                      engine="sequential")
        finally:
            second_done.set()

    def write_summary(self, every):
        if threading.current_thread() is threading.main_thread() and not second_summarizing.is_set():
            threading.Thread(target=second_sweep).start()  # the first has read the records, not yet written
            assert second_summarizing.wait(120)
            second_done.wait(5)  # it ends here unless it waits for the first to write
        return real_write(self, every)

    monkeypatch.setattr(Sweep, "summarize", summarize)
    monkeypatch.setattr(Sweep, "write_summary", write_summary)
    run_sweep(checkpoint, [specs["first"]], protocol, out, log=lambda m: None, show_progress=False,
              engine="sequential")
    assert second_done.wait(120)
    (file,) = out.glob("*/*/summary.json")
    assert sorted(json.loads(file.read_text())["tasks"]) == ["first", "second"]
