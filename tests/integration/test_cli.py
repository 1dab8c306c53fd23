"""The command line as a user meets it: summaries, --json, caching, and one-line errors with exit code 2."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_command

from encoderlab.core.io import CONFIGS


def run_cli(*args: str, home: Path, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ENCODERLAB_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "encoderlab.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, synthetic) -> Path:
    path = tmp_path_factory.mktemp("src") / "notes.jsonl"
    path.write_text("".join(json.dumps({"body": d.text, "n": i}) + "\n" for i, d in enumerate(synthetic(300))))
    return path


def test_prepare_local_jsonl_json_summary_and_cache(tmp_path, corpus_file):
    out = tmp_path / "ds"
    args = ["data", "prepare", str(corpus_file), "--out", str(out), "--text-column", "body", "--vocab-size", "300",
            "--seq-len", "32", "--json"]
    summary = json.loads(run_cli(*args, home=tmp_path).stdout)
    assert summary["corpus"]["documents"] == 300
    assert summary["vocab_size"] == 300 and summary["seq_len"] == 32 and summary["dtype"] == "uint16"
    total = summary["splits"]["train"]["tokens"] + summary["splits"]["validation"]["tokens"]
    assert total > 0 and Path(summary["packed"], "meta.json").exists()
    again = run_cli(*args, home=tmp_path)
    assert "up to date" in again.stderr and json.loads(again.stdout)["splits"] == summary["splits"]
    human = run_cli(*args[:-1], home=tmp_path, cwd=tmp_path).stdout
    assert "300 documents" in human and "windows x 32" in human
    mini = CONFIGS / "pretrain" / "mini-mlm40.yaml"  # outside a clone: the shipped file, so that it runs as printed
    assert human.splitlines()[-1] == f"next: encoderlab pretrain {mini} --set data.path={out / 'packed'}", human
    inspect = json.loads(run_cli("data", "inspect", summary["packed"], "--json", home=tmp_path).stdout)
    assert inspect["seq_len"] == 32 and inspect["documents"][0]["tokens"] > 0


@pytest.mark.parametrize("args, message", [
    (["data", "prepare", "/no/such/file.jsonl"], "no such file or directory"),
    (["data", "prepare", "{corpus}", "--text-column", "text"], "'text'"),
    (["data", "prepare", "{corpus}", "--text-column", "body", "--vocab-size", "10"], "too small"),
    (["data", "prepare", "{corpus}", "--text-column", "body", "--seq-len", "100000"], "fewer than one window"),
    (["data", "inspect", "{tmp}"], "not a packed dataset"),
    (["pretrain", "{tmp}/missing.yaml"], "config file not found"),
])
def test_errors_are_one_line(tmp_path, corpus_file, args, message):
    args = [a.format(corpus=corpus_file, tmp=tmp_path) for a in args]
    proc = run_cli(*_with_out(args, tmp_path), home=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["finetune", "{tmp}", "rt-polarity", "--lr", "abc"], "finetune: Invalid value for '--lr'"),
    (["finetune"], "finetune: Missing argument 'checkpoint'"),
    (["pretrian"], "No such command 'pretrian'"),
    (["sweep", "{tmp}", "rt-polarity", "--no-such-option"], "No such option: --no-such-option"),
    (["study", "run", "{tmp}", "--workers"], "encoderlab study run: Option '--workers' requires an argument"),
])
def test_a_wrong_command_line_is_one_line(tmp_path, args, message):
    proc = run_cli(*[a.format(tmp=tmp_path) for a in args], home=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and "--help)" in proc.stderr


def _with_out(args: list[str], tmp_path: Path) -> list[str]:
    return [*args, "--out", str(tmp_path / "o")] if args[:2] == ["data", "prepare"] else args


def test_pretrain_dry_run_and_bad_override(tmp_path, packed_dir, monkeypatch, capsys):
    config = Path(__file__).resolve().parents[2] / "configs" / "pretrain" / "demo-tiny.yaml"

    def pretrain(*args: str) -> tuple[int, str, str]:
        return run_command(monkeypatch, capsys, "pretrain", config, "--dry-run", *args, home=tmp_path)
    code, out, err = pretrain("--json", "--set", f"data.path={packed_dir}", "--set", "objective=clm:25%,mlm40:75%",
                              "--set", f"out_dir={tmp_path}")
    assert code == 0, err
    plan = json.loads(out)
    assert [p["objective"] for p in plan["phases"]] == ["clm", "mlm40"]
    assert plan["phases"][0]["steps"] == round(0.25 * plan["config"]["train"]["steps"])
    assert plan["model"]["vocab_size"] == 320 and plan["seq_len"] == 64
    assert (plan["dtype"], plan["dtype_asked"], plan["device"]) == (plan["config"]["train"]["dtype"], "auto", "cpu")
    code, text, err = pretrain("--set", f"data.path={packed_dir}")  # the file's `auto`, as it resolved
    assert code == 0 and re.search(r"compute (bf16|fp32) \(dtype: auto\) on cpu", text), err
    code, text, err = pretrain("--set", f"data.path={packed_dir}", "--set", "train.dtype=fp32")  # named: said as is
    assert code == 0 and "compute fp32 on cpu" in text and "(dtype:" not in text, err
    code, _, err = pretrain("--set", "train.stepz=3")
    assert code == 2 and "train.stepz: unknown key" in err
    code, _, err = pretrain("--set", f"data.path={packed_dir}", "--set", "objective=xlm")
    assert code == 2 and "unknown objective 'xlm'" in err


def test_a_run_says_its_notes_once(tmp_path, packed_dir, monkeypatch, capsys):
    """The description a run prints first leaves its notes to the run, which says them as it starts."""
    config = Path(__file__).resolve().parents[2] / "configs" / "pretrain" / "demo-tiny.yaml"
    args = ("--set", f"data.path={packed_dir}", "--set", f"out_dir={tmp_path}", "--set", "train.steps=3", "--set",
            "train.global_batch=2", "--set", "lr_schedule={warmup_steps: 2, decay_steps: 5}", "--set",
            "train.tensorboard=false")
    note = "warmup_steps 2 + decay_steps 5 exceed train.steps 3"
    for extra in (["--dry-run"], []):
        code, out, err = run_command(monkeypatch, capsys, "pretrain", config, *args, *extra, home=tmp_path)
        assert code == 0 and (out + err).count(note) == 1, out + err


def test_set_updates_a_section_and_replaces_it_only_when_told(tmp_path, packed_dir, monkeypatch, capsys):
    config = Path(__file__).resolve().parents[2] / "configs" / "pretrain" / "demo-tiny.yaml"

    def schedule(value: str) -> dict:
        code, out, err = run_command(monkeypatch, capsys, "pretrain", config, "--dry-run", "--json", "--set",
                                     f"data.path={packed_dir}", "--set", value, home=tmp_path)
        assert code == 0, err
        return json.loads(out)["config"]["lr_schedule"]
    merged = schedule("lr_schedule={warmup_steps: 1}")  # the file's decay_steps 50 stays (it became 2000)
    assert (merged["warmup_steps"], merged["decay_steps"], merged["kind"]) == (1, 50, "wsd")
    replaced = schedule("lr_schedule!={warmup_steps: 1}")  # asked for: the rest at the defaults
    assert replaced["warmup_steps"] == 1 and replaced["decay_steps"] != 50
    help_text = " ".join(run_cli("pretrain", "--help", home=tmp_path).stdout.split())
    assert "SECTION!=VALUE replaces the whole section" in help_text


def test_the_default_protocol_and_demo_study_ship_with_the_package():
    """Without --protocol a sweep uses configs/eval/demo.yaml, which ships inside the package, so a wheel install and
    a clone use the same file; the clone's top-level configs/ is that folder."""
    import encoderlab
    from encoderlab.core.io import CONFIGS
    from encoderlab.finetuning.protocol import DEFAULT_PROTOCOL

    root = Path(__file__).resolve().parents[2]
    assert DEFAULT_PROTOCOL.resolve() == (root / "configs" / "eval" / "demo.yaml").resolve()
    assert DEFAULT_PROTOCOL.is_relative_to(Path(encoderlab.__file__).resolve().parent)
    assert (CONFIGS / "studies" / "demo.yaml").exists()


def test_demo_refuses_a_wrong_study_before_building_the_data(tmp_path, monkeypatch, capsys):
    """`demo --study` with a missing or invalid study file is refused in one line before the offline suite is
    fetched and built (minutes of work, and a data folder the user did not ask for)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    for study, says in ((tmp_path / "nope.yaml", "config file not found"), (bad, "evaluation: Field required")):
        code, out, err = run_command(monkeypatch, capsys, "demo", "--study", study, home=tmp_path / "home")
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and says in lines[0], err
        assert not (tmp_path / "home").exists() and out == ""


def test_ctrl_c_in_pretraining_says_how_to_resume(tmp_path, packed_dir, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from encoderlab.cli import app
    from encoderlab.pretraining import loop

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "run", "out_dir": str(tmp_path / "runs"), "data": {"path": str(packed_dir)},
        "model": {"preset": "micro", "num_hidden_layers": 1}, "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 4, "global_batch": 2, "dtype": "fp32", "tensorboard": False}}))

    def interrupted(self, stop_at=None):
        self.step = 3
        raise KeyboardInterrupt

    monkeypatch.setattr(loop.Trainer, "run", interrupted)
    result = CliRunner().invoke(app, ["pretrain", str(config), "--set", "train.seed=1"])
    assert result.exit_code == 130
    assert "interrupted at step 3; no checkpoint was written yet: `encoderlab pretrain" in result.output
    assert "--resume` starts it again from step 0" in result.output


def test_a_full_disk_where_no_writer_names_its_file_is_one_line(tmp_path, packed_dir, monkeypatch, capsys):
    """Appends to metrics.jsonl or TensorBoard files are not atomic writes: their failure reaches the command line,
    which says it in one line (exit 1: work had started); an OSError that is no write failure keeps its traceback
    (a bug)."""
    import errno
    import sys

    import yaml

    from encoderlab.cli import main
    from encoderlab.runs import logging as train_logging

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "run", "out_dir": str(tmp_path / "runs"), "data": {"path": str(packed_dir)},
        "model": {"preset": "micro", "num_hidden_layers": 1}, "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 2, "dtype": "fp32", "tensorboard": False}}))
    metrics = tmp_path / "runs" / "run" / "metrics.jsonl"

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(metrics))

    monkeypatch.setattr(train_logging.MetricsLog, "write", full)
    monkeypatch.setattr(sys, "argv", ["encoderlab", "pretrain", str(config), "--json"])
    with pytest.raises(SystemExit) as exit_:
        main()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert exit_.value.code == 1 and errors == [f"error: cannot write: {metrics}: No space left on device"]

    def broken(self, record):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(train_logging.MetricsLog, "write", broken)
    monkeypatch.setattr(sys, "argv", ["encoderlab", "pretrain", str(config), "--json", "--resume"])
    with pytest.raises(OSError, match="Bad file descriptor"):
        main()
