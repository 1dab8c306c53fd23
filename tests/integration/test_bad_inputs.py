"""Bad inputs across the command line, one table: each is refused before any work, the way the conventions say.

Every case runs the real command line (in this process, for speed) and must: exit with code 2, print exactly one
line on stderr that starts with "error:" and contains the case's `says` text (what is wrong and where), print no
traceback, and leave no new or changed file under the test's folder.

A case's arguments may name `{tmp}` (the test's folder), `{packed}` (a small packed dataset), `{ckpt}` (a
checkpoint of a 2-step run, read-only for the cases) and `{run}` (that run's folder). `setup(tmp, ctx)` writes
the files a case needs before the folder is snapshotted; `ctx` holds the same names as the placeholders.
Sections are kept apart so that each area's cases are added in its own place.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from encoderlab.config import validate
from encoderlab.train.config import PretrainConfig
from encoderlab.train.loop import Trainer

ROOT = Path(__file__).resolve().parents[2]
DEMO_TINY = ROOT / "configs" / "pretrain" / "demo-tiny.yaml"


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    says: str
    setup: Callable[[Path, dict], None] | None = None


def write(relative: str, text: str) -> Callable[[Path, dict], None]:
    """A setup that writes one file (formatted with the placeholders) under the test's folder."""
    def setup(tmp: Path, ctx: dict) -> None:
        path = tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**ctx))
    return setup


def run_config(**changes) -> Callable[[Path, dict], None]:
    """A setup that writes `run.yaml`: a 2-step micro run on the small packed dataset, with `changes` merged in."""
    def setup(tmp: Path, ctx: dict) -> None:
        config = _micro_run(ctx["packed"], tmp / "runs")
        for key, value in changes.items():
            section, _, field = key.partition("__")
            if field:
                config.setdefault(section, {})[field] = value
            else:
                config[section] = value
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
    return setup


def _micro_run(packed: Path, out_dir: Path) -> dict:
    return {"name": "run", "out_dir": str(out_dir), "data": {"path": str(packed)},
            "model": {"preset": "micro", "num_hidden_layers": 1},
            "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
            "train": {"steps": 2, "global_batch": 2, "dtype": "fp32", "tensorboard": False}}


# ------------------------------------------------------------------------------------------ command line, configs
CLI_CASES = [
    Case("pretrain-missing-config", ("pretrain", "{tmp}/missing.yaml"), "config file not found"),
    Case("pretrain-unknown-key", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "train.stepz=3"),
         "train.stepz: unknown key"),
    Case("pretrain-unknown-objective", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "objective=xlm"),
         "unknown objective 'xlm'", run_config()),
    Case("pretrain-warmup-past-end", ("pretrain", "{tmp}/run.yaml"), "warmup", run_config(lr_schedule__warmup_steps=9)),
    Case("data-prepare-missing-source", ("data", "prepare", "/no/such/file.jsonl", "--out", "{tmp}/o"),
         "no such file or directory"),
    Case("data-inspect-not-packed", ("data", "inspect", "{tmp}"), "not a packed dataset"),
]

# ------------------------------------------------------------------------------------------ task files, sweeps
TASK_CASES: list[Case] = []

# ------------------------------------------------------------------------------------------ resume, data, checkpoints
def resumable(*damage: Callable[[Path], None], **changes) -> Callable[[Path, dict], None]:
    """A setup: a copy of the shared finished run in {tmp}/runs/run (each of `damage` applied to the copy's folder)
    and `run.yaml` continuing it with `changes`."""
    def setup(tmp: Path, ctx: dict) -> None:
        shutil.copytree(ctx["run"], tmp / "runs" / "run")
        for hurt in damage:
            hurt(tmp / "runs" / "run")
        run_config(**changes)(tmp, ctx)
    return setup


def latest_file(name: str, text: str | None = None) -> Callable[[Path], None]:
    """Damage a file of the run's last checkpoint: replace its text, or delete it (text None)."""
    def hurt(run: Path) -> None:
        path = run / "checkpoints" / (run / "LATEST").read_text().strip() / name
        path.unlink() if text is None else path.write_text(text)
    return hurt


def own_data(hurt: Callable[[Path], None]) -> Callable[[Path, dict], None]:
    """A setup: a copy of the packed dataset in {tmp}/packed, damaged by `hurt`, and run.yaml training on it."""
    def setup(tmp: Path, ctx: dict) -> None:
        shutil.copytree(ctx["packed"], tmp / "packed")
        hurt(tmp / "packed")
        run_config(data={"path": str(tmp / "packed")})(tmp, ctx)
    return setup


def cut_short(packed: Path) -> None:
    with open(packed / "train-00000.tokens.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) - 128)


def flip_bytes(packed: Path) -> None:
    with open(packed / "train-00000.docids.bin", "r+b") as f:
        f.seek(64)
        f.write(bytes(b ^ 0xFF for b in f.read(64)))
        f.seek(64)


def prepared(hurt: Callable[[Path], None]) -> Callable[[Path, dict], None]:
    """A setup: a small corpus prepared (as PREPARE's arguments say) into {tmp}/d, whose packed/ is then hurt."""
    def setup(tmp: Path, ctx: dict) -> None:
        from encoderlab.data.prepare import PrepareOptions, prepare
        from tests.conftest import synthetic_documents

        rows = (json.dumps({"text": d.text}) for d in synthetic_documents(60))
        (tmp / "docs.jsonl").write_text("\n".join(rows) + "\n")
        prepare(str(tmp / "docs.jsonl"), tmp / "d", PrepareOptions(vocab_size=300, seq_len=16, val_fraction=0.1),
                log=lambda message: None)
        hurt(tmp / "d" / "packed")
    return setup


PREPARE = ("data", "prepare", "{tmp}/docs.jsonl", "--out", "{tmp}/d", "--vocab-size", "300", "--seq-len", "16",
           "--val-fraction", "0.1")
RESUME = ("pretrain", "{tmp}/run.yaml", "--resume")
DRY_RUN = ("pretrain", "{tmp}/run.yaml", "--dry-run")
RESUME_CASES = [
    Case("resume-changed-seed", RESUME, "train.seed: 0 -> 1", resumable(train__seed=1)),
    Case("resume-changed-data-seed", RESUME, "data.seed: 0 -> 1", resumable(data__seed=1)),
    Case("resume-changed-objective", RESUME, "objective: 'mlm40' -> 'clm'", resumable(objective="clm")),
    Case("resume-changed-lr", RESUME, "optim.lr: 0.0005 -> 0.001", resumable(optim__lr=1e-3)),
    Case("resume-changed-decay", RESUME, "lr_schedule.decay_steps: 1 -> 2", resumable(lr_schedule__decay_steps=2)),
    Case("resume-changed-batch", RESUME, "train.global_batch: 2 -> 4", resumable(train__global_batch=4)),
    Case("resume-changed-dtype", RESUME, "train.dtype: 'fp32' -> 'bf16'", resumable(train__dtype="bf16")),
    Case("resume-changed-model", RESUME, "model.num_hidden_layers: 1 -> 2",
         resumable(model={"preset": "micro", "num_hidden_layers": 2})),
    Case("resume-more-steps-needs-extend", RESUME, "train.steps: 2 -> 4; to train it further, pass --extend",
         resumable(train__steps=4)),
    Case("extend-a-decayed-run", (*RESUME[:2], "--extend"), "at step 2 the run's LR was 0 x peak, this config "
         "gives 1 x peak, so it would not continue the same run; branch a new run from its stable checkpoint "
         "{tmp}/runs/run/checkpoints/step-0000001 with --set init.branch_from=", resumable(train__steps=4)),
    Case("extend-to-fewer-steps", (*RESUME[:2], "--extend"), "it is already planned for 2; --extend adds steps",
         resumable(train__steps=1)),
    Case("resume-no-run", RESUME, "nothing to continue in {tmp}/runs/run", run_config()),
    Case("extend-no-run", (*RESUME[:2], "--extend"), "nothing to continue in {tmp}/runs/run", run_config()),
    Case("resume-config-yaml-damaged", RESUME, "config.yaml is damaged",
         resumable(lambda run: (run / "config.yaml").write_text("train: [1, 2"))),
    Case("resume-state-json-invalid", RESUME, "state.json has 1 bytes", resumable(latest_file("state.json", "{"))),
    Case("resume-state-json-missing", RESUME, "which is missing or incomplete (no state.json)",
         resumable(latest_file("state.json"))),
    Case("resume-checksums-missing", RESUME, "checksums.json is missing", resumable(latest_file("checksums.json"))),
    Case("pretrain-truncated-shard", DRY_RUN, "packed shard {tmp}/packed/train-00000.tokens.bin has",
         own_data(cut_short)),
    Case("pretrain-missing-shard", DRY_RUN, "packed shard {tmp}/packed/train-00000.docids.bin is missing",
         own_data(lambda packed: (packed / "train-00000.docids.bin").unlink())),
    Case("pretrain-meta-json-invalid", DRY_RUN, "meta.json is not a valid index of packed shards",
         own_data(lambda packed: (packed / "meta.json").write_text("{"))),
    Case("pretrain-meta-json-without-splits", DRY_RUN, "meta.json is not a valid index of packed shards (no 'splits')",
         own_data(lambda packed: (packed / "meta.json").write_text('{"format": 1, "seq_len": 64, "dtype": "uint16", '
                                                                   '"tokenizer": {"vocab_size": 320}}'))),
    Case("pretrain-meta-json-missing", DRY_RUN, "no packed dataset at {tmp}/packed",
         own_data(lambda packed: (packed / "meta.json").unlink())),
    Case("pretrain-token-ids-beyond-vocab", (*DRY_RUN, "--set", "model.vocab_size=100"),
         "but the model's vocabulary has 100 ids (model.vocab_size)", run_config()),
    Case("prepare-truncated-shard", PREPARE, "packed shard {tmp}/d/packed/train-00000.tokens.bin has",
         prepared(cut_short)),
    Case("prepare-damaged-shard", PREPARE, "train-00000.docids.bin does not match its SHA-256 in meta.json",
         prepared(flip_bytes)),
]

# ------------------------------------------------------------------------------------------ files, folders, paths
IO_CASES: list[Case] = []

CASES = CLI_CASES + TASK_CASES + RESUME_CASES + IO_CASES


@pytest.fixture(scope="module")
def context(tmp_path_factory, packed_dir) -> dict:
    out = tmp_path_factory.mktemp("runs")
    cfg = validate(PretrainConfig, _micro_run(packed_dir, out), "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run()
    run = out / "run"
    return {"packed": packed_dir, "run": run, "ckpt": next((run / "checkpoints").glob("step-*"))}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (-1, 0)
            for p in folder.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_in_one_line(case: Case, tmp_path, context, monkeypatch, capsys):
    from encoderlab.cli import main

    ctx = {**context, "tmp": tmp_path}
    if case.setup:
        case.setup(tmp_path, ctx)
    before, shared_before = snapshot(tmp_path), snapshot(context["run"])
    monkeypatch.setattr(sys, "argv", ["encoderlab", *(a.format(**ctx) for a in case.args)])
    monkeypatch.setenv("COLUMNS", "400")  # one line, however long the message
    with pytest.raises(SystemExit) as exit_:
        main()
    stderr = capsys.readouterr().err
    assert exit_.value.code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert case.says.format(**ctx) in lines[0], stderr
    assert "Traceback" not in stderr
    assert snapshot(tmp_path) == before, "a refused command left or changed files"
    assert snapshot(context["run"]) == shared_before, "a refused command changed the shared run"
    assert os.access(tmp_path, os.W_OK)
