"""The protocol as stored (in every record, sweep summary and study plan) and its key: the format, the migration from
earlier formats, and the key's algorithm.

Format 1 holds every setting of `finetuning/protocol.py` `Protocol` and `format_version: 1`. Format 0 (no
`format_version`) is what was stored before: a protocol written before a setting existed lacks it, and ran at the
value `SETTINGS_ADDED` gives; `upgrade` fills them in.

The protocol key (`demo-1a2b3c4d`, the folder a protocol's records are filed under) is the protocol's name and a hash
of its settings. Its algorithm is versioned by `KEY_ALGORITHM`, beside the hash and never inside it: version 1 hashes
every setting but the reporting ones (`REPORTING`) and `format_version`, and leaves out each setting of
`SETTINGS_ADDED` (and of `SUBSETTINGS_ADDED` inside its section) while it holds that value, so that a protocol of
either format has the key its records were filed under when they were written. Any other value of such a setting
is hashed, so runs under it never mix with the older ones. Version 2 (the current one) leaves out the grid as well
(`GRID`: `lrs`, `seeds`): a record is the result of one (LR, seed) run, which no other point of the grid changes, so
sweeps of one protocol over other grids (a seed added, one more LR, `finetune --lr --seed`) share one folder and run
only the points not yet recorded there; whoever reads the folder takes the records of its own grid
(`finetuning/records.py` `in_grid`). The folders of version 1, one per grid, are read as part of their version-2
folder by `finetuning/migrate_keys.py`.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

from encoderlab.core import formats

FORMAT = 1
KEY_ALGORITHM = 2
REPORTING = ("name", "curve_every", "eval_batch_size", "wandb", "lr_choice")  # never part of the key
GRID = ("lrs", "seeds")  # part of the key of algorithm 1 only

# Settings added after records existed, at the value that reproduces the records made before each existed.
SETTINGS_ADDED = {"max_length_fraction": 0.99, "weights": "fp32", "sentence_pairs": "segments",
                  "holdout": "encoderlab",
                  "retrieval": {"train_on": None, "corpus": "all", "relevance": "graded", "loss": "infonce"},
                  "tokens": {"labels": "first_subword", "dropout": 0.0, "metric": "entity_f1"},
                  "qa": {"format": "spans"}, "inputs": "bos_eos", "classification_head": "linear",
                  "batch_order": "length_buckets"}
# Settings added inside a section after records existed (the rest of the section hashed as before).
SUBSETTINGS_ADDED = {"retrieval": {"ndcg": "standard"}}
# Reporting settings added after protocols were stored in plans: the rule of the time before them.
REPORTING_ADDED = {"lr_choice": "mean_over_seeds"}


def upgrade(protocol: dict, where: str | Path) -> dict:
    """A stored protocol (of `where`) in the current format; refused when its format is newer than this code's."""
    return formats.upgrade(protocol, where, [_from_unversioned])


def _from_unversioned(protocol: dict) -> dict:
    out = copy.deepcopy(protocol)
    for key, value in {**SETTINGS_ADDED, **REPORTING_ADDED}.items():
        out.setdefault(key, copy.deepcopy(value))
    for section, added in SUBSETTINGS_ADDED.items():
        if isinstance(out.get(section), dict):
            out[section] = {**added, **out[section]}
    return out


def key(protocol: dict, algorithm: int = KEY_ALGORITHM) -> str:
    """`demo-1a2b3c4d`: the protocol's name and a hash of its settings, by key algorithm `algorithm` (1 or 2, the
    current one; module docstring). Algorithm 1 names the folders records were filed under before version 2."""
    if algorithm not in (1, 2):
        raise ValueError(f"key algorithm {algorithm!r}: this encoderlab knows 1 and 2")
    left_out = (*REPORTING, formats.FIELD, *(GRID if algorithm >= 2 else ()))
    settings = {k: _hashed_section(k, v) for k, v in protocol.items() if k not in left_out}
    settings = {k: v for k, v in settings.items() if not (k in SETTINGS_ADDED and v == SETTINGS_ADDED[k])}
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', protocol.get('name', 'protocol'))}-{digest}"


def _hashed_section(name: str, value):
    added = SUBSETTINGS_ADDED.get(name)
    if not added or not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if not (k in added and v == added[k])}
