"""The result store: one JSON record per fine-tuning run, written atomically, found again by its key.

`OUT/<checkpoint-tag>/<protocol-key>/<task>/<fingerprint>/lr<lr>-seed<seed>.json`. A run with a record (finished or
failed) is never redone, so a killed sweep started again does only what is left; the protocol key (its name and a
hash of its settings) keeps runs made under different protocols apart, and the task's fingerprint (a hash of its
definition and data files, tasks/taskfile.py) runs of a task whose data or definition changed: those
are run again, and the old records stay where they were. The key leaves out the grid (key algorithm 2,
finetuning/migrate_protocol.py): a record is one (LR, seed) run, so a grid grown by a seed or an LR runs only its new
points, `finetune --lr --seed` finds the sweep's run, and every reader takes only the records of the grid it asks for
(`in_grid`). The folders of key algorithm 1, one per grid, are read with their key-2 folder (`folders`, `find`:
finetuning/migrate_keys.py).

A record belongs to the weights it was made from: each names the SHA-256 of its checkpoint's `model.safetensors`
(`weights_sha256`; for a transformers folder, of every file that decides its outputs, listed under `model_files`:
runs/encoders.py `encoder_identity`), and nothing is used unchecked. A record is used (reused by a sweep, counted
by a summary or a report) only when it reads, has the fields of a record, is the record of its own place (task,
fingerprint, protocol key, tag, LR and seed as its path says: not another run's copied over) and was made from these
weights. One `OUT/<tag>` holds one model's records (`other_owner`: a sweep of another is refused). Anything
else is run again by a sweep and named in its log, or left out of a report and named there. Every record is read
through `finetuning/migrate_records.py` (records of earlier formats, in the current one) and written with its
`format_version`.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from encoderlab.core.io import write_json
from encoderlab.finetuning import migrate_keys, migrate_protocol, migrate_records

WEIGHTS = "weights_sha256"  # the record's field: the SHA-256 of the weights file it was made from
MODEL_FILES = "model_files"  # a transformers folder's record: {file: SHA-256} of what WEIGHTS is the digest of


def checkpoint_tag(checkpoint: str | Path) -> str:
    """`runs/demo/checkpoints/step-0000250` -> `demo-step-0000250`; any other path -> its last two parts."""
    path = Path(checkpoint).resolve()
    parts = [path.parent.parent.name, path.name] if path.parent.name == "checkpoints" else [path.parent.name, path.name]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))


def other_owner(root: Path, tag: str, checkpoint: Path, identity: Callable[[Path], str]) -> Path | None:
    """The model whose records fill `root/tag` when it is another: a model still at another place, with the same
    last two path parts as `checkpoint` (so the same tag), that is not this model (`identity(path)`, called only
    then, differs). None when the folder is free or holds the records of this model, of a copy of it (the same
    model elsewhere reuses them), of a model since gone (a run pretrained again elsewhere: its old records are
    replaced), or records written into another folder and copied here (a copied project: they name the original's
    models, which this folder's sweeps replace, as they did before records named their folder)."""
    here, named = checkpoint.resolve(), set()
    for path in sorted((root / tag).glob("*/*/*/lr*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (isinstance(record, dict) and isinstance(record.get("checkpoint"), str)
                and record.get("records_root") == str(root.resolve())):
            named.add(Path(record["checkpoint"]))
    mine = None
    for there in sorted(named):
        if there != here and there.exists():
            mine = mine or identity(here)
            if identity(there) != mine:
                return there
    return None


def protocol_key(protocol: dict) -> str:
    """`demo-1a2b3c4d`: the folder a protocol's records are filed under (finetuning/migrate_protocol.py `key`)."""
    return migrate_protocol.key(protocol)


def record_path(root: Path, tag: str, key: str, task: str, fingerprint: str, lr: float, seed: int) -> Path:
    return root / tag / key / task / fingerprint / f"lr{lr:g}-seed{seed}.json"


def folders(root: Path, tag: str, key: str) -> list[Path]:
    """Where the records of key `key` are: its folder, then the key-1 folders of the same settings (other grids)."""
    return [root / tag / key, *migrate_keys.legacy_folders(root, tag, key)]


class Found(NamedTuple):
    """One run's record as `find` reads it: the one used (None: the run is not done) and where it is; `unused`:
    `PATH: why` for its files that are not usable; `differing`: other usable records of it with other results."""
    record: dict | None
    path: Path | None
    unused: list[str]
    differing: list[str]


def find(root: Path, tag: str, key: str, task: str, fingerprint: str, lr: float, seed: int, weights: str | None,
         files: dict[str, str] | None = None, places: list[Path] | None = None) -> Found:
    """The record of one run (`usable`, for `weights` and `files`) in any folder of `key` (`folders`, or `places`
    where the caller has listed them for many runs); of several, the one migrate_keys.py `choose`s."""
    found, unused = [], []
    for folder in places if places is not None else folders(root, tag, key):
        path = folder / task / fingerprint / f"lr{lr:g}-seed{seed}.json"
        record, why = usable(path, weights, files)
        if record is not None:
            found.append((path, record))
        elif why:
            unused.append(f"{path}: {why}")
    if not found:
        return Found(None, None, unused, [])
    (path, record), differing = migrate_keys.choose(found, key)
    return Found(record, path, unused, differing)


def recorded(root: Path, tag: str, key: str, scored: list[tuple[str, str]], trained_on: str, lr: float, seed: int,
             weights: str | None) -> list[dict] | None:
    """The one rule for "this run is done", for a sweep and for a study's jobs: every task it scores (`scored`: name,
    fingerprint) has a usable record of these weights, made by a model trained on the data of fingerprint
    `trained_on` (a record from before `trained_on` was written was trained on its own task). Returns those records
    (in `scored`'s order), or None when the run is not done."""
    found = []
    for name, fingerprint in scored:
        record = find(root, tag, key, name, fingerprint, lr, seed, weights).record
        if record is None or record["trained_on"].get("fingerprint") != trained_on:
            return None
        found.append(record)
    return found


def other_versions(root: Path, tag: str, key: str, task: str, fingerprint: str) -> list[Path]:
    """Folders with records of the same task name under another fingerprint (or none: before fingerprints), in
    any folder of `key`."""
    places = [f / task for f in folders(root, tag, key)]
    if not any(p.is_dir() for p in places) or any(any((p / fingerprint).glob("lr*.json")) for p in places):
        return []
    others = [d for p in places if p.is_dir() for d in sorted(p.iterdir()) if d.is_dir() and any(d.glob("lr*.json"))]
    return others + [p for p in places if any(p.glob("lr*.json"))]


def usable(path: Path, weights: str | None, files: dict[str, str] | None = None) -> tuple[dict | None, str]:
    """(the record at `path`, "") when it may be used for weights `weights` (None: any); (None, "") when there is
    none; (None, why) when the file there is not one to use: unreadable, not a record, another place's, or made from
    other weights. `files`: a transformers folder's `model_files`, to say which of them changed."""
    if not path.exists():
        return None, ""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):  # a torn file cannot exist (atomic writes): a damaged or hand-made one is not used
        return None, "does not read as a JSON record"
    if isinstance(record, dict):
        record = migrate_records.upgrade(record, path)
    why = _not_a_record(record) or _not_its_place(record, path) or _other_weights(record, weights, files)
    return (None, why) if why else (record, "")


FIELDS = {"task": str, "tag": str, "fingerprint": str, "lr": (int, float), "seed": int, "status": str,
          "protocol": dict, "family": str, "metric": str, "trained_on": dict}


def _not_a_record(record) -> str:
    if not isinstance(record, dict):
        return "is not a record (a JSON object)"
    wrong = [k for k, kind in FIELDS.items() if not isinstance(record.get(k), kind) or isinstance(record[k], bool)]
    scores = ("scores.validation", "scores.test") if record.get("status") == "ok" else ()
    wrong += [k for k in ("baseline.test", *scores) if not isinstance(_score(record, k), (int, float))]
    # A run that scored NaN or infinity is recorded as failed (training.scored_record): such an "ok" one is damaged
    wrong += [f"{k} (not finite)" for k in scores
              if isinstance(_score(record, k), float) and not math.isfinite(_score(record, k))]
    if record.get("status") not in ("ok", "failed") or (record["status"] == "failed"
                                                        and not isinstance(record.get("reason"), str)):
        wrong.append("status")
    return f"is not a whole record: {', '.join(wrong)} missing or of the wrong type" if wrong else ""


def _score(record: dict, where: str):
    for part in (*where.split("."), "score"):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def _not_its_place(record: dict, path: Path) -> str:
    """Where the record's own key differs from its path's (another run's record copied or moved here)."""
    task = path.parent.parent
    try:
        key = protocol_key(record["protocol"])
        if task.parent.name == migrate_protocol.key(record["protocol"], 1):
            key = task.parent.name  # filed by key algorithm 1 (finetuning/migrate_keys.py): its own place then
    except (TypeError, ValueError, AttributeError):
        key = "?"
    own = {"run": f"lr{record['lr']:g}-seed{record['seed']}.json", "fingerprint": record["fingerprint"],
           "task": record["task"], "protocol key": key, "tag": record["tag"]}
    place = {"run": path.name, "fingerprint": path.parent.name, "task": task.name, "protocol key": task.parent.name,
             "tag": task.parent.parent.name}
    differ = [f"{k} {own[k]} (its path says {place[k]})" for k in own if own[k] != place[k]]
    return f"is another run's record: {'; '.join(differ)}" if differ else ""


def _other_weights(record: dict, weights: str | None, files: dict[str, str] | None) -> str:
    made = record.get(WEIGHTS)
    if weights is None or made == weights:
        return ""
    if made is None:  # a record of format 0 whose checkpoint is gone (finetuning/migrate_records.py)
        return (f"was made before records named their weights, and the checkpoint it names "
                f"({record.get('checkpoint')}) is gone or unreadable: which weights made it cannot be told")
    if files is None:
        return f"was made from other weights (SHA-256 {str(made)[:12]}, this checkpoint's {weights[:12]})"
    theirs = record.get(MODEL_FILES)
    if not isinstance(theirs, dict):  # its digest is of the weights alone, whatever config and tokenizer read them
        return ("was made before records covered a model folder's config.json and tokenizer files: which of them "
                "made it cannot be told")
    changed = sorted(name for name in {*files, *theirs} if files.get(name) != theirs.get(name))
    return f"was made from other model files ({', '.join(changed) or 'their list'} changed since)"


def write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


Grid = tuple[Sequence[float], Sequence[int]]  # a protocol's (lrs, seeds)


def scan(root: Path, tag: str = "*", key: str = "*", weights: str | None = None, *,
         grid: Grid | None = None) -> tuple[list[dict], list[str]]:
    """The usable records under `root/tag/key` (made from `weights`, None: any; of `grid`'s runs, None: any), and
    `PATH: why` for every file there that is not used. A key given reads every folder of it (`folders`), one
    record per run (`find`), and names only the files of `grid`'s runs; `key="*"` lists every file of every folder
    as it is."""
    if key == "*":
        found, unused = [], []
        for path in sorted(root.glob(f"{tag}/{key}/*/*/lr*.json")):
            record, why = usable(path, weights)
            if record is not None:
                found.append(record)
            elif why:
                unused.append(f"{path}: {why}")
        return in_grid(found, grid), unused
    found, unused = [], []
    for where in sorted(p for p in root.glob(tag) if p.is_dir()):
        kept, named = _scan_key(root, where.name, key, weights, grid)
        found, unused = found + kept, unused + named
    return found, unused


def _scan_key(root: Path, tag: str, key: str, weights: str | None, grid: Grid | None) -> tuple[list[dict], list[str]]:
    """`scan` of one tag's folders of `key`: each run of `grid` found once, by `find`."""
    places = folders(root, tag, key)
    found, unused = [], []
    for task, fingerprint, name in sorted({(p.parent.parent.name, p.parent.name, p.name)
                                           for f in places for p in f.glob("*/*/lr*.json")}):
        run = _run_of(name)
        if run is None:  # not a record's name: the file is named, never counted
            unused += [f"{p}: is not a record of a run (lr<LR>-seed<SEED>.json)"
                       for f in places if (p := f / task / fingerprint / name).exists()]
        elif grid is None or in_grid([{"lr": run[0], "seed": run[1]}], grid):  # not another grid's run
            one = find(root, tag, key, task, fingerprint, *run, weights, places=places)
            found += [one.record] if one.record is not None else []
            unused += one.unused + one.differing
    return found, unused


def _run_of(name: str) -> tuple[float, int] | None:
    """(lr, seed) of a record's file name, when it is one `record_path` writes."""
    match = re.fullmatch(r"lr(.+)-seed(\d+)\.json", name)
    try:
        run = (float(match.group(1)), int(match.group(2))) if match else None
    except ValueError:
        return None
    return run if run is not None and f"lr{run[0]:g}-seed{run[1]}.json" == name else None


def in_grid(recs: list[dict], grid: Grid | None) -> list[dict]:
    """The records of `grid`'s runs (None: all): a key holds every grid's runs of its settings, and a protocol's
    scores, summaries and reports count only the LRs and seeds it asks for."""
    if grid is None:
        return recs
    lrs, seeds = {f"{lr:g}" for lr in grid[0]}, set(grid[1])
    return [r for r in recs if f"{r['lr']:g}" in lrs and r["seed"] in seeds]


def load_all(root: Path, tag: str = "*", key: str = "*", weights: str | None = None, *,
             grid: Grid | None = None) -> list[dict]:
    return scan(root, tag, key, weights, grid=grid)[0]


def current(recs: list[dict], fingerprints: dict[str, str | None] | None = None) -> list[dict]:
    """Per task name, the records of its data now (`fingerprints`: {task: the fingerprint of the data its files
    hold now}, where known) or, where that is not known, of the fingerprint recorded last: the old records of a task
    whose data changed stay on disk, but only one version is reported. The data now decides before the newest
    records do: a task whose data was edited, run, and restored counts the records of the restored data again."""
    known = {t: f for t, f in (fingerprints or {}).items() if f is not None}
    newest: dict[str, tuple[str, str | None]] = {}
    for r in recs:
        stamp = (r.get("finished", ""), r.get("fingerprint"))
        if r["task"] not in newest or stamp[0] > newest[r["task"]][0]:
            newest[r["task"]] = stamp  # type: ignore[assignment]
    return [r for r in recs if r.get("fingerprint") == known.get(r["task"], newest[r["task"]][1])]
