"""The result store: one JSON record per fine-tuning run, written atomically, found again by its key.

`OUT/<checkpoint-tag>/<protocol-key>/<task>/<fingerprint>/lr<lr>-seed<seed>.json`. A run with a record (finished or
failed) is never redone, so a killed sweep started again does only what is left; the protocol key (its name and a
hash of its settings) keeps runs made under different protocols apart, and the task's fingerprint (a hash of its
definition and data files, evaluation/tasks/taskfile.py) runs of a task whose data or definition changed: those
are run again, and the old records stay where they were.
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


# Settings added after records existed, at the value that reproduces those records: left out of the hash there, so
# that the records made before each setting existed keep their key; any other value is hashed, so never mixes.
ADDED_SETTINGS = {"max_length_fraction": 0.99, "weights": "fp32", "sentence_pairs": "segments", "holdout": "encoderlab",
                  "retrieval": {"train_on": None, "corpus": "all", "relevance": "graded", "loss": "infonce"},
                  "tokens": {"labels": "first_subword", "dropout": 0.0, "metric": "entity_f1"},
                  "qa": {"format": "spans"}, "inputs": "bos_eos", "classification_head": "linear",
                  "batch_order": "length_buckets"}
# Settings added inside a section after records existed: dropped from it at that value, the rest of it hashed as before.
ADDED_SUBSETTINGS = {"retrieval": {"ndcg": "standard"}}
REPORTING = ("name", "curve_every", "eval_batch_size", "wandb", "lr_choice")  # never part of the key


def protocol_key(protocol: dict) -> str:
    """`demo-1a2b3c4d`: the protocol's name and a hash of every setting but the reporting ones."""
    settings = {k: _without_added(k, v) for k, v in protocol.items() if k not in REPORTING}
    settings = {k: v for k, v in settings.items() if not (k in ADDED_SETTINGS and v == ADDED_SETTINGS[k])}
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', protocol.get('name', 'protocol'))}-{digest}"


def _without_added(key: str, value):
    added = ADDED_SUBSETTINGS.get(key)
    if not added or not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if not (k in added and v == added[k])}


def record_path(root: Path, tag: str, key: str, task: str, fingerprint: str, lr: float, seed: int) -> Path:
    return root / tag / key / task / fingerprint / f"lr{lr:g}-seed{seed}.json"


def other_versions(root: Path, tag: str, key: str, task: str, fingerprint: str) -> list[Path]:
    """Folders with records of the same task name under another fingerprint (or none: before fingerprints)."""
    folder = root / tag / key / task
    if not folder.is_dir() or any((folder / fingerprint).glob("lr*.json")):
        return []
    others = [p for p in sorted(folder.iterdir()) if p.is_dir() and any(p.glob("lr*.json"))]
    return others + ([folder] if any(folder.glob("lr*.json")) else [])


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
    pattern = f"{tag}/{key}/*/*/lr*.json"
    out = []
    for path in sorted(root.glob(pattern)):
        record = read(path)
        if record is not None:
            out.append(record)
    return out


def current(recs: list[dict]) -> list[dict]:
    """Per task name, the records of the fingerprint recorded last: the old records of a task whose data changed
    stay on disk, but only its newest version is reported."""
    newest: dict[str, tuple[str, str | None]] = {}
    for r in recs:
        stamp = (r.get("finished", ""), r.get("fingerprint"))
        if r["task"] not in newest or stamp[0] > newest[r["task"]][0]:
            newest[r["task"]] = stamp  # type: ignore[assignment]
    return [r for r in recs if r.get("fingerprint") == newest[r["task"]][1]]
