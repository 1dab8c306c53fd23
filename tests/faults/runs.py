"""The tiny pretraining run of the fault tests (a plain dict: it also travels as JSON to tests/faults/killer.py)."""
from __future__ import annotations

from pathlib import Path

STEPS = 6  # clm for 3 steps then mlm40: checkpoints 1, 2 (periodic), 3 (phase), 4 (stable), 5 (periodic), 6 (final)
TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}


def config(out: Path, packed: Path, name: str, **train) -> dict:
    return {"name": name, "out_dir": str(out), "data": {"path": str(packed)}, "model": TINY,
            "objective": "clm:50%,mlm40", "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 2},
            "train": {"steps": STEPS, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                      "tensorboard": False, "save_every": 1, "keep_checkpoints": 1, **train}}
