"""Records filed under key algorithm 1, read under the current key: the migration of the protocol key
(finetuning/migrate_protocol.py `KEY_ALGORITHM`).

Key algorithm 1 hashed the grid (`lrs`, `seeds`), so each grid of one protocol had a folder of its own; algorithm 2
does not, and all those folders belong to one key-2 folder. They are never moved, merged on disk or rewritten
(docs/reliability.md, section 20: reading never rewrites, and an older encoderlab still reads what it wrote): whoever
reads a key-2 folder (`records.find`, `records.scan`) reads its key-1 folders with it, behind its own files, and a
sweep writes only into the key-2 folder, so a run recorded under key 1 is found and never made again, nothing is
copied that a kill could leave half-written, and no record is lost.

Which folders they are is read off their records: a folder of the tag is a key-1 folder of key K when a record in it
is of its own place under key 1 (its protocol's key-1 is the folder's name) and its protocol's key 2 is K. A folder's
name is a hash of its settings, so once told, what it is never changes: the answer is kept for the process.

One run (task, data, LR, seed, weights) recorded in several of these folders (a grid grown under key 1 made every
point again) is one run, and one record of it is used (`choose`): the one in the key-2 folder where there is one
(made by this encoderlab, after none of the others was usable), else the newest, the one the last sweep of that
protocol reported. Copies with the same results are the same measurement; one with other results (another engine,
device or kernel gives other rounding) is named beside the one used, never averaged in and never dropped unsaid.
"""
from __future__ import annotations

import json
from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning import migrate_protocol

RESULT = ("status", "scores", "reason")  # what two records of one run must agree on to be one measurement
_KEY2: dict[Path, str | None] = {}  # a folder -> the key-2 key it is a key-1 folder of (None: it is none)


def legacy_folders(root: Path, tag: str, key: str) -> list[Path]:
    """The key-1 folders under `root/tag` whose records belong to key-2 folder `key`, by name."""
    base = root / tag
    if not base.is_dir():
        return []
    name = key.rsplit("-", 1)[0]  # both algorithms name a folder by the protocol's name, then the hash
    return [f for f in sorted(base.iterdir())
            if f.name != key and f.name.rsplit("-", 1)[0] == name and f.is_dir() and _key2_of(f) == key]


def _key2_of(folder: Path) -> str | None:
    known = folder.resolve()
    if known not in _KEY2:
        found = _read_key2(folder)
        if found == "":
            return None  # no record to tell by yet: asked again next time
        _KEY2[known] = found
    return _KEY2[known]


def _read_key2(folder: Path) -> str | None:
    """The key-2 key of the first record in `folder` filed there by key 1; None when a record says the folder is
    not key 1's (a key-2 folder); "" when no record tells."""
    for path in sorted(folder.glob("*/*/lr*.json")):
        try:
            stored = json.loads(path.read_text()).get("protocol")
            if not isinstance(stored, dict):
                continue
            protocol = migrate_protocol.upgrade(stored, path)  # keys alone: the record's own migration reads more
            if migrate_protocol.key(protocol) == folder.name:
                return None
            if migrate_protocol.key(protocol, 1) == folder.name:
                return migrate_protocol.key(protocol)
        except (OSError, ValueError, TypeError, AttributeError, KeyError, EncoderlabError):
            continue  # damaged, foreign or of a newer format: the next record tells, or none does
    return ""


def choose(found: list[tuple[Path, dict]], key: str) -> tuple[tuple[Path, dict], list[str]]:
    """Of one run's usable records (`found`, each with its path; the key-2 folder's first), the one used, and
    `PATH: why` for each other whose results differ from it (module docstring)."""
    own = [f for f in found if f[0].parents[2].name == key]
    chosen = own[0] if own else max(found, key=lambda f: f[1].get("finished", ""))  # first of equals: by name
    why = ("the record filed under the current protocol key is used" if own else
           f"the newest, finished {chosen[1].get('finished', '?')}, is used (what the last sweep of it reported)")
    differ = [f"{path}: the run of {chosen[0]} recorded again under an older grid, with other results "
              f"({_result(record)}; used: {_result(chosen[1])}): not counted, {why}"
              for path, record in found if path != chosen[0] and _differs(record, chosen[1])]
    return chosen, differ


def _differs(a: dict, b: dict) -> bool:
    return any(a.get(k) != b.get(k) for k in RESULT)


def _result(record: dict) -> str:
    if record.get("status") != "ok":
        return f"failed: {record.get('reason')}"
    scores = record["scores"]
    return f"validation {scores['validation']['score']:.4g}, test {scores['test']['score']:.4g}"


def same_run(stored: dict, identity: dict, recs) -> bool:
    """Whether a saved fine-tuned model's identity `stored` (finetuning/model_saving.py; written under key algorithm
    1, its records `recs`) is the run of `identity`: the same but for the protocol key, which is key 1 of the protocol
    its records hold, and that protocol's key 2 is `identity`'s. Such a model is kept, not trained again to be
    saved under the new key."""
    if not isinstance(stored, dict) or not isinstance(recs, dict) or stored.keys() != identity.keys():
        return False
    if any(stored[k] != identity[k] for k in identity if k != "protocol_key"):
        return False
    for record in recs.values():
        try:
            protocol = migrate_protocol.upgrade(record["protocol"], "a saved model's record")
            if (migrate_protocol.key(protocol, 1) == stored["protocol_key"]
                    and migrate_protocol.key(protocol) == identity["protocol_key"]):
                return True
        except (TypeError, KeyError, AttributeError, ValueError, EncoderlabError):
            continue
    return False
