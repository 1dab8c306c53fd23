"""The tiny pretraining run of the fault tests (a plain dict: it also travels as JSON to tests/faults/killer.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

STEPS = 6  # clm for 3 steps then mlm40: checkpoints 1, 2 (periodic), 3 (phase), 4 (stable), 5 (periodic), 6 (final)
TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}


def config(out: Path, packed: Path, name: str, **train) -> dict:
    return {"name": name, "out_dir": str(out), "data": {"path": str(packed)}, "model": TINY,
            "objective": "clm:50%,mlm40", "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 2},
            "train": {"steps": STEPS, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                      "tensorboard": False, "save_every": 1, "keep_checkpoints": 1, **train}}


def copied_run(written: Path, tmp_path: Path, packed: Path, **train) -> Path:
    """`written`/run copied into tmp_path with its config (run.yaml, `train` as it was written with) and new.yaml,
    another run's config, to branch from it: each test damages or plants in a copy of its own."""
    shutil.copytree(written / "run", tmp_path / "run")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(tmp_path, packed, "run", **train)))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(config(tmp_path, packed, "new")))
    return tmp_path / "run"
