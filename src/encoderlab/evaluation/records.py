"""The result store: one JSON record per fine-tuning run, written atomically, found again by its key.

`OUT/<checkpoint-tag>/<protocol-key>/<task>/lr<lr>-seed<seed>.json`. A run with a record (finished or failed) is
never redone, so a killed sweep started again does only what is left; the protocol key (its name and a hash of its
settings) keeps runs made under different protocols apart.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from encoderlab.io import write_json


def checkpoint_tag(checkpoint: str | Path) -> str:
    """`runs/demo/checkpoints/step-0000250` -> `demo-step-0000250`; any other path -> its last two parts."""
    path = Path(checkpoint).resolve()
    parts = [path.parent.parent.name, path.name] if path.parent.name == "checkpoints" else [path.parent.name, path.name]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))


def protocol_key(protocol: dict) -> str:
    """`demo-1a2b3c4d`: the protocol's name and a hash of every setting but the reporting ones."""
    settings = {k: v for k, v in protocol.items() if k not in ("name", "curve_every", "eval_batch_size")}
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', protocol.get('name', 'protocol'))}-{digest}"


def record_path(root: Path, tag: str, key: str, task: str, lr: float, seed: int) -> Path:
    return root / tag / key / task / f"lr{lr:g}-seed{seed}.json"


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


def load_all(root: Path, tag: str = "*", key: str = "*") -> list[dict]:
    pattern = f"{tag}/{key}/*/*.json"
    out = []
    for path in sorted(root.glob(pattern)):
        record = read(path)
        if record is not None:
            out.append(record)
    return out
