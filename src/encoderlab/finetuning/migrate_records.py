"""A fine-tuning record of any format, in the current one: what `finetuning/records.py` reads every record through.

Format 1: `format_version: 1`, the protocol in its own current format (finetuning/migrate_protocol.py), and every
field `finetuning/sweep.py` writes. Format 0 (no `format_version`) is what was written before; some were written
before one of these fields existed, and read today as they did when they were written:
- `trained_on`: a run without it was trained on its own task;
- `weights_sha256`: a run without it was made from the checkpoint it names; that checkpoint's weights now, or None
  when it is gone or unreadable (then which weights made it cannot be told, and the record is used for none);
- `baselines`: the lexical baselines recorded before the model's view (the inputs cut to the model's length) read
  whole texts: named here as the full-text ones are named now.
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.core import formats
from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import migrate_protocol
from encoderlab.runs import checkpoint as ckpt

FORMAT = 1
WEIGHTS = "weights_sha256"
# The lexical baselines' names and the suffix of their full-text runs, as records name them: stored names, so they
# stay as written whatever the baselines are called in code.
LEXICAL = ("tfidf_logreg", "bm25")
FULL_TEXT = "_full_text"


def upgrade(record: dict, where: str | Path) -> dict:
    """The record read from `where` in the current format; refused when its format (or its protocol's) is newer
    than this code's. A record that is not whole is left to `records.usable` to name: only what it has is moved."""
    out = formats.upgrade(record, where, [_from_unversioned])
    if isinstance(out.get("protocol"), dict):
        out["protocol"] = migrate_protocol.upgrade(out["protocol"], f"{where} (its protocol)")
    return out


def _from_unversioned(record: dict) -> dict:
    out = dict(record)
    if "trained_on" not in out and isinstance(out.get("task"), str):
        out["trained_on"] = {"task": out["task"], "fingerprint": out.get("fingerprint")}
    if WEIGHTS not in out:
        named = out.get("checkpoint")
        out[WEIGHTS] = _weights_at(named) if isinstance(named, str) else None
    if isinstance(out.get("baselines"), dict):
        out["baselines"] = {split: _full_text_named(named) for split, named in out["baselines"].items()}
    return out


def _full_text_named(named):
    if not isinstance(named, dict) or any(str(n).endswith(FULL_TEXT) for n in named):
        return named
    return {(n + FULL_TEXT if n in LEXICAL else n): scores for n, scores in named.items()}


def _weights_at(checkpoint: str) -> str | None:
    path = Path(checkpoint)
    if not (path / ckpt.WEIGHTS).is_file():
        return None
    try:
        return ckpt.weights_digest(path)
    except (OSError, EncoderlabError):
        return None
