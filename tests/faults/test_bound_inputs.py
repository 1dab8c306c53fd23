"""What a run or a dataset is made of is bound to it: a run whose config.yaml is lost resumes only as itself (its
checkpoint's recorded config, or a config the user adopts by name); the packed data's tokenizer is verified with its
shards and is part of the data's identity a checkpoint records; one `data prepare` writes an output at a time, and
the next one removes what a killed one left.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from runs import config
from test_divergence import command

from encoderlab.core.process import run_lock
from encoderlab.data import packing


def write_run(tmp_path, packed, name="run", **train) -> object:
    cfg = config(tmp_path, packed, name, **train)
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / f"{name}.yaml"


def test_a_run_without_its_config_resumes_only_as_itself(tmp_path, packed_dir, monkeypatch, capsys, one_thread):
    run_yaml = write_run(tmp_path, packed_dir, steps=4)
    assert command(monkeypatch, capsys, "pretrain", run_yaml)[0] == 0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    (tmp_path / "run" / "config.yaml").unlink()
    # Another LR: refused against the config the checkpoint recorded (it used to be accepted and written down).
    code, errors, _ = command(monkeypatch, capsys, "pretrain", run_yaml, "--resume", "--set", "optim.lr=1e-2")
    assert code == 2 and "optim.lr: 0.0005 -> 0.01" in errors[0], errors
    assert not (tmp_path / "run" / "config.yaml").exists()
    # Its own config (a FREE key changed): resumed, and config.yaml written again as it was.
    code, errors, _ = command(monkeypatch, capsys, "pretrain", run_yaml, "--resume", "--set", "train.log_every=2")
    assert code == 0, errors
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()) == \
        {**yaml.safe_load(saved), "train": {**yaml.safe_load(saved)["train"], "log_every": 2}}


def test_a_checkpoint_that_recorded_no_config_resumes_only_when_told(tmp_path, packed_dir, monkeypatch, capsys,
                                                                      one_thread):
    from tests.integration.test_bad_inputs import state_without_config

    run_yaml = write_run(tmp_path, packed_dir, steps=4)
    assert command(monkeypatch, capsys, "pretrain", run_yaml)[0] == 0
    (tmp_path / "run" / "config.yaml").unlink()
    state_without_config(tmp_path / "run")
    code, errors, _ = command(monkeypatch, capsys, "pretrain", run_yaml, "--resume", "--set", "optim.lr=1e-2")
    assert code == 2 and "pass --adopt-config" in errors[0], errors
    code, errors, _ = command(monkeypatch, capsys, "pretrain", run_yaml, "--resume", "--adopt-config")
    assert code == 0, errors
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["optim"]["lr"] == 5e-4


def test_a_checkpoint_knows_its_datas_tokenizer(tmp_path, packed_dir, monkeypatch, capsys, one_thread):
    """The same windows re-packed with another tokenizer (its digests in meta.json, so the data itself checks):
    a run trained on the first cannot resume on it."""
    import shutil

    from tests.integration.test_bad_inputs import swap_tokenizer

    packed = tmp_path / "packed"
    shutil.copytree(packed_dir, packed)
    run_yaml = write_run(tmp_path, packed, steps=4)
    assert command(monkeypatch, capsys, "pretrain", run_yaml)[0] == 0
    swap_tokenizer(packed)
    meta = packing.read_meta(packed)
    (packed / "meta.json").write_text(json.dumps({**meta, "tokenizer_files": packing.tokenizer_files(packed)}))
    code, errors, _ = command(monkeypatch, capsys, "pretrain", run_yaml, "--resume")
    assert code == 2 and "data.path (other content than the run trained on)" in errors[0], errors


def _corpus(tmp_path, documents=3000):
    from tests.conftest import synthetic_documents

    rows = (json.dumps({"text": d.text}) for d in synthetic_documents(documents))
    (tmp_path / "docs.jsonl").write_text("\n".join(rows) + "\n")
    return tmp_path / "docs.jsonl"


def _prepare(tmp_path, seq_len: int) -> subprocess.Popen:
    args = ["data", "prepare", str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "d"), "--vocab-size", "300",
            "--seq-len", str(seq_len), "--val-fraction", "0.1"]
    return subprocess.Popen([sys.executable, "-m", "encoderlab.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "1000"})


def test_two_data_prepares_into_one_out(tmp_path):
    _corpus(tmp_path)
    # A writer that holds the folder: the second is refused in one line naming it, and writes nothing.
    with run_lock(tmp_path / "d", "a prepared dataset"):
        second = _prepare(tmp_path, 64)
        _, err = second.communicate(timeout=300)
    errors = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 2 and len(errors) == 1, err
    assert f"process {os.getpid()}" in errors[0] and "is writing there" in errors[0], err
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [".lock"]
    # Two real ones at once: whichever ends last with exit 0 is what the folder holds; one refused exits 2.
    runs = {seq_len: _prepare(tmp_path, seq_len) for seq_len in (128, 64)}
    ended: dict[int, tuple] = {}
    while len(ended) < len(runs):  # the order in which they end decides which one's data stays
        ended.update({s: (p.returncode, time.monotonic(), p.stderr.read()) for s, p in runs.items()
                      if s not in ended and p.poll() is not None})
        time.sleep(0.01)
    for code, _, err in ended.values():
        assert code == 0 or (code == 2 and "is writing there" in err and "Traceback" not in err), err
    winner = max((s for s, (code, _, _) in ended.items() if code == 0), key=lambda s: ended[s][1])
    assert packing.read_meta(tmp_path / "d" / "packed")["seq_len"] == winner
    assert json.loads((tmp_path / "d" / "summary.json").read_text())["seq_len"] == winner


def test_a_killed_prepares_leftovers_are_removed_by_the_next(tmp_path):
    """SIGTERM ends a process without its cleanup: what an atomic write had begun stays beside the output."""
    _corpus(tmp_path, 200)
    first = _prepare(tmp_path, 16)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    left = [tmp_path / "d" / ".packed.tmp-999-abcd", tmp_path / "d" / ".corpus.old-999"]
    for folder in left:
        (folder / "x").mkdir(parents=True)
    (tmp_path / "d" / ".summary.json.tmp-999").write_text("{")
    again = _prepare(tmp_path, 16)
    assert again.wait(timeout=300) == 0
    assert "removed what an interrupted prepare left" in again.stderr.read()
    assert not [p.name for p in (tmp_path / "d").iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_an_offline_suite_with_a_cut_task_file_is_built_again(tmp_path, monkeypatch):
    """`data prepare offline` used to say "up to date" over a truncated task file: every file is now checked
    against suite.json, and the (deterministic) suite built again when one differs."""
    from encoderlab.core.io import write_json
    from encoderlab.data import prepare as prep
    from encoderlab.data.offline import build

    builds: list[Path] = []

    def fake_build(out, log=print, parallel=False):  # the pinned wheels are not needed to test when a build happens
        builds.append(out)
        (out / "tasks" / "t").mkdir(parents=True, exist_ok=True)
        (out / "tasks" / "t" / "train.jsonl").write_text('{"text": "a review", "label": "pos"}\n' * 50)
        (out / "corpus").mkdir(exist_ok=True)
        (out / "corpus" / "documents.jsonl").write_text('{"id": "d", "source": "s", "text": "t"}\n')
        suite = {"recipe": build.RECIPE_VERSION, "files": build._suite_files(out)}
        write_json(out / "suite.json", suite)
        return suite

    monkeypatch.setattr(prep.offline, "build_offline_suite", fake_build)
    said: list[str] = []
    for _ in range(2):
        prep._offline_text(tmp_path, prep.PrepareOptions(), said.append)
    assert len(builds) == 1 and said[-1] == f"offline tasks and corpus up to date in {tmp_path}"
    task = tmp_path / "tasks" / "t" / "train.jsonl"
    task.write_bytes(task.read_bytes()[:100])
    prep._offline_text(tmp_path, prep.PrepareOptions(), said.append)
    assert len(builds) == 2 and f"{task} differs from the file the suite built" in said[-2]
    # A suite built before suite.json kept digests is built again once, not trusted.
    write_json(tmp_path / "suite.json", {"recipe": build.RECIPE_VERSION})
    prep._offline_text(tmp_path, prep.PrepareOptions(), said.append)
    assert len(builds) == 3 and "records no file digests" in said[-2]
