"""A damaged checkpoint through the user's commands: each file of the LATEST checkpoint truncated, deleted or with
flipped bytes is refused by `pretrain --resume`, `pretrain` with `init.from_weights`, `export`, `finetune` and
`sweep`: exit code 2, one error line naming the file and the older complete checkpoint, no traceback, no new file.
Following that line (writing the older checkpoint into LATEST) resumes to the weights of an uninterrupted run. A
damaged metrics.jsonl record is refused too, while a torn last one (a kill's) is dropped.

tests/unit/test_checkpoint_verify.py checks the same refusals function by function; these go through the CLI.
"""
from __future__ import annotations

import shutil

import pytest
from conftest import run_command
import torch
from runs import STEPS, config, copied_run
from safetensors.torch import load_file

from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

LATEST_STEP, OLDER_STEP = "step-0000004", "step-0000003"


def trainer(out, packed, name, resume=False):
    cfg = validate(PretrainConfig, config(out, packed, name, save_every=2, keep_checkpoints=3), "test")
    return Trainer(cfg, resume=resume, show_progress=False, log=lambda message: None)


@pytest.fixture(scope="module")
def written(tmp_path_factory, packed_dir, classification_task):
    """A run stopped after step 4 of 6 (checkpoints 2, 3 = phase, 4 = stable and LATEST), the same run never
    stopped, and a classification task for fine-tuning."""
    out = tmp_path_factory.mktemp("damaged")
    trainer(out, packed_dir, "run").run(stop_at=4)
    trainer(out, packed_dir, "straight").run()
    classification_task(out / "task")
    return out


@pytest.fixture
def run(written, tmp_path, packed_dir):
    return copied_run(written, tmp_path, packed_dir, save_every=2, keep_checkpoints=3)


def damage(path, how):
    if how == "delete":
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        return
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:  # 64 bytes flipped in the middle
        start = max(0, len(data) // 2 - 32)
        path.write_bytes(data[:start] + bytes(b ^ 0xFF for b in data[start:start + 64]) + data[start + 64:])


TASK = "{written}/task/task.yaml"
COMMANDS = {
    "resume": ["pretrain", "{tmp}/run.yaml", "--resume"],
    "from-weights": ["pretrain", "{tmp}/new.yaml", "--set", "init.from_weights={run}"],
    "export": ["export", "{run}", "--out", "{tmp}/exported"],
    "finetune": ["finetune", "{run}", TASK, "--lr", "1e-3", "--out", "{tmp}/evals", "--set", "max_steps=1"],
    "sweep": ["sweep", "{run}", TASK, "--out", "{tmp}/evals", "--set", "max_steps=1", "--engine", "sequential"],
}
# (command, file of the LATEST checkpoint, damage, what the error says of it); a folder stands for all its files
CASES = [
    ("resume", "model.safetensors", "flip", "does not match its SHA-256"),
    ("resume", "dcp", "delete", "dcp/.metadata is missing"),
    ("resume", "state.json", "truncate", "bytes, checksums.json records"),
    ("resume", "tokenizer", "delete", "is missing (checksums.json lists it)"),
    ("resume", "checksums.json", "delete", "checksums.json is missing"),
    ("from-weights", "model.safetensors", "truncate", "bytes, checksums.json records"),
    ("export", "model.safetensors", "delete", "model.safetensors is missing"),
    ("export", "model_config.json", "flip", "does not match its SHA-256"),
    ("export", "checksums.json", "truncate", "checksums.json is damaged"),
    ("finetune", "model.safetensors", "flip", "does not match its SHA-256"),
    ("finetune", "tokenizer/tokenizer.json", "truncate", "bytes, checksums.json records"),
    ("sweep", "model.safetensors", "truncate", "bytes, checksums.json records"),
]


def files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize(("command", "name", "how", "says"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_a_damaged_checkpoint_is_refused_by_every_command(run, written, monkeypatch, capsys, command, name, how,
                                                          says):
    folder = run / "checkpoints" / LATEST_STEP
    damage(folder / name, how)
    before = files(run.parent)
    args = [a.format(tmp=run.parent, run=run, written=written) for a in COMMANDS[command]]
    code, _, stderr = run_command(monkeypatch, capsys, *args)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in stderr, stderr
    assert f"checkpoint file {folder}/" in errors[0] and says in errors[0], errors[0]
    assert f"{run / 'checkpoints' / OLDER_STEP} is an older complete checkpoint" in errors[0]
    after = files(run.parent)
    assert after == before, "a refused command wrote or changed files"


def test_the_older_checkpoint_the_refusal_names_resumes_to_the_uninterrupted_run(run, written, packed_dir):
    damage(run / "checkpoints" / LATEST_STEP / "model.safetensors", "flip")
    with pytest.raises(EncoderlabError, match=f"write {OLDER_STEP} into {run / 'LATEST'}"):
        trainer(run.parent, packed_dir, "run", resume=True)
    (run / "LATEST").write_text(OLDER_STEP + "\n")  # what the message says to do
    resumed = trainer(run.parent, packed_dir, "run", resume=True)
    assert resumed.step == 3
    resumed.run()
    final = checkpoint.checkpoint_name(STEPS)
    a, b = (load_file(str(r / "checkpoints" / final / checkpoint.WEIGHTS)) for r in (written / "straight", run))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_damaged_metrics_record_before_the_last_is_refused_and_a_torn_last_one_dropped(run):
    from encoderlab.runs.logging import MetricsLog

    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 5, "ph')  # torn by a kill: redone anyway
    MetricsLog(run, resume_from=3, tensorboard=False).close()
    assert (run / "metrics.jsonl").read_text() == "".join(line + "\n" for line in lines[:3])
    lines[1] = lines[1][:-1]  # not the last line: damage, not a kill's cut
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    with pytest.raises(EncoderlabError, match=r"metrics\.jsonl: record 2 is not JSON .*restore it or move it away"):
        MetricsLog(run, resume_from=3, tensorboard=False)


POSITIONS = [("samples_seen", 1, "data position"), ("samples_seen", -4, "data position"),
             ("samples_seen", "x", "data position"), ("step", "4", "is not a count of steps")]


@pytest.mark.parametrize(("field", "value", "says"), POSITIONS)
def test_a_data_position_that_is_not_its_steps_is_refused_naming_the_state(run, written, monkeypatch, capsys, field,
                                                                           value, says):
    import json

    folder = run / "checkpoints" / LATEST_STEP
    state = json.loads((folder / "state.json").read_text())
    (state["data"] if field == "samples_seen" else state)[field] = value
    (folder / "state.json").write_text(json.dumps(state))
    checkpoint.write_manifest(folder)  # as anyone editing it can: its numbers, not its bytes, are wrong
    before = files(run.parent)
    code, _, stderr = run_command(monkeypatch, capsys, "pretrain", run.parent / "run.yaml", "--resume")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in stderr, stderr
    assert f"{folder / 'state.json'}" in errors[0] and says in errors[0], errors[0]
    assert files(run.parent) == before
