"""The result store: one JSON record per fine-tuning run, written atomically, found again by its key.

`OUT/<checkpoint-tag>/<task>/lr<lr>-seed<seed>.json`. A run with a record (finished or failed) is never redone, so
a killed sweep started again does only what is left.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from encoderlab.data.atomic import write_json


def checkpoint_tag(checkpoint: str | Path) -> str:
    """`runs/demo/checkpoints/step-0000250` -> `demo-step-0000250`; any other path -> its last two parts."""
    path = Path(checkpoint).resolve()
    parts = [path.parent.parent.name, path.name] if path.parent.name == "checkpoints" else [path.parent.name, path.name]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))


def record_path(root: Path, tag: str, task: str, lr: float, seed: int) -> Path:
    return root / tag / task / f"lr{lr:g}-seed{seed}.json"


def read(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a torn file cannot exist (atomic writes), but a hand-edited one is redone, not trusted


def write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def load_all(root: Path, tag: str | None = None) -> list[dict]:
    pattern = f"{tag}/*/*.json" if tag else "*/*/*.json"
    out = []
    for path in sorted(root.glob(pattern)):
        record = read(path)
        if record is not None:
            out.append(record)
    return out
