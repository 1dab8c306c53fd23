"""Loading extractive QA sets: the offline suite's folders, SQuAD-format JSON files, and the paper's sets (SQuAD,
SQuAD v2, ReCoRD, QED) from the Hugging Face Hub or a local copy in the hub schema; where a test set is hidden,
the validation split held out of train (`holdout`: whole articles, or datasets' train_test_split)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np

from encoderlab.core import unique_names
from encoderlab.core.errors import DataError, resolved, short
from encoderlab.core.io import read_jsonl, utf8_text
from encoderlab.data.offline.taskfiles import read_task
from encoderlab.tasks.base import SPLITS
from encoderlab.tasks.common import HOLDOUT_FRACTION, HOLDOUT_SEED, check_hub, split_validation
from encoderlab.tasks.qa import QATask

# The authors' copies (docs/paper.md#the-datasets-on-the-hugging-face-hub): hgissbkh/record and hgissbkh/qed are in
# SQuAD's schema, as are local copies;
# ReCoRD in SuperGLUE's schema (aps/super_glue:record) is read too.
HUB = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2", "record": "hgissbkh/record", "qed": "hgissbkh/qed"}


def _record_rows(ds) -> list[dict]:
    """ReCoRD rows (passage, query, entity_spans, answers, idx) in the cloze schema with answer spans."""
    rows = []
    for row in ds:
        context, spans = row["passage"], row.get("entity_spans") or {"text": [], "start": []}
        texts, starts = [], []
        for answer in dict.fromkeys(row["answers"]):
            found = [s for t, s in zip(spans["text"], spans["start"]) if t == answer and context[s:].startswith(t)]
            if not found:  # no entity span recorded for it: every occurrence of the string
                at = context.find(answer)
                while at >= 0 and answer:
                    found.append(at)
                    at = context.find(answer, at + 1)
            found = sorted(set(found))
            texts, starts = texts + [answer] * len(found), starts + found
        if texts:
            idx = row["idx"]
            rows.append(_row(f"record-{idx['passage']}-{idx['query']}", context, row["query"], texts, starts))
    return rows


def _hub_unreachable(spec: str, reason: str) -> DataError:
    return DataError(f"cannot load {spec!r} from the Hugging Face Hub ({' '.join(reason.split())[:200]}); give a "
                     "local copy in the same schema instead (a folder with train/validation files), e.g. squad=DIR")


def load_hub_qa(kind: Literal["squad", "squad_v2", "record", "qed"], source: str | None = None,
                holdout: str = "encoderlab", *, fingerprint: str = "") -> QATask:
    """A paper QA set from the hub (`owner/name[:config]`) or a local folder in the hub schema.

    Their test answers are hidden: test = the official validation split, validation = 5% of train held out
    (`holdout`: encoderlab's whole articles or passages with a fixed seed, or the authors' train_test_split).
    """
    if kind not in HUB:
        raise DataError(f"unknown QA dataset {kind!r}; known: {', '.join(HUB)}")
    spec = source or HUB[kind]
    local = Path(spec).expanduser()
    if not local.exists():
        check_hub(spec, "train and validation files in the hub schema, e.g. squad=DIR")
    import datasets  # deferred: heavy, and only these loaders need it

    try:
        hub_id, _, config = spec.partition(":")
        ds = datasets.load_dataset(str(local)) if local.exists() else datasets.load_dataset(hub_id, config or None)
    except Exception as e:
        if local.exists():
            raise DataError(f"{local}: not readable as a {kind} dataset in the hub schema ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]})") from e
        raise _hub_unreachable(spec, f"{type(e).__name__}: {e}") from e
    missing = [s for s in ("train", "validation") if s not in ds]
    if missing:
        raise DataError(f"{spec!r} has no {' or '.join(missing)} split (it has {', '.join(ds)})")
    if "passage" in ds["train"].column_names:  # ReCoRD in SuperGLUE's schema
        train, test = _record_rows(ds["train"]), _record_rows(ds["validation"])
    else:
        train, test = ([_row(r.get("id", f"{s}-{i}"), r["context"], r["question"], r["answers"]["text"],
                             r["answers"]["answer_start"], r.get("title", "")) for i, r in enumerate(ds[s])]
                       for s in ("train", "validation"))
    train, validation = split_validation(train, holdout, hold_out_articles)
    return QATask(kind, {"train": train, "validation": validation, "test": test},
                  allow_unanswerable=kind == "squad_v2", fingerprint=fingerprint)


def load_offline_qa(root: Path, name: str, *, fingerprint: str = "") -> QATask:
    folder, _ = read_task(root, name, "qa")
    return QATask(name, {s: list(read_jsonl(folder / f"{s}.jsonl")) for s in SPLITS}, fingerprint=fingerprint)


def hold_out_articles(rows: list[dict], fraction: float = HOLDOUT_FRACTION,
             seed: int = HOLDOUT_SEED) -> tuple[list[dict], list[dict]]:
    """(train, validation): whole articles (or passages) in a seeded order until `fraction` of the rows."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_group(row), []).append(row)
    names = sorted(groups)
    held: set[str] = set()
    count = 0
    for i in np.random.default_rng(seed).permutation(len(names)):
        if count >= fraction * len(rows):
            break
        held.add(names[i])
        count += len(groups[names[i]])
    return [r for r in rows if _group(r) not in held], [r for r in rows if _group(r) in held]


def _group(row: dict) -> str:
    return row.get("title") or row["context"]


def _row(qid, context: str, question: str, texts: list[str], starts: list[int], title: str = "") -> dict:
    return {"id": str(qid), "context": context, "question": question,
            "answers": {"text": list(texts), "answer_start": list(starts)}, "title": title}


SQUAD_SCHEMA = ('an object {"data": [article, ...]}, each article {"title", "paragraphs": [paragraph, ...]}, each '
                'paragraph {"context", "qas": [{"id", "question", "answers": [{"text", "answer_start"}, ...]}, ...]}')
JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number",
              float: "a number", type(None): "null"}


class _NotSquad(Exception):
    """Where and how a SQuAD file's content leaves the schema (`_read_squad_json` names its file)."""


def _field(obj, key: str, where: str, kind: type | None = list):
    """`obj[key]`, of `kind` (None: any), or _NotSquad saying what `where` holds instead."""
    if not isinstance(obj, dict):
        raise _NotSquad(f"{where} is {JSON_KINDS.get(type(obj), type(obj).__name__)}, not an object")
    if key not in obj:
        raise _NotSquad(f"{where} has no {key!r} (keys: {', '.join(map(str, obj)) or 'none'})")
    if kind is not None and not isinstance(obj[key], kind):
        raise _NotSquad(f"{where}.{key} is {JSON_KINDS.get(type(obj[key]), '?')}, not {JSON_KINDS[kind]}")
    return obj[key]


def _text(obj, key: str, where: str) -> str:
    """`obj[key]`, a string with more than white space in it (an empty question or context would be trained and
    scored as if it said something), or _NotSquad."""
    value = _field(obj, key, where, str)
    if not value.strip():
        raise _NotSquad(f"{where}.{key} is empty ({value!r}); a {key} must hold text")
    return value


def _flag(obj: dict, key: str, where: str) -> bool:
    """`obj[key]` as a boolean, False when absent: JSON's true or false, or the integer 1 or 0 of a writer without
    booleans. Nothing else: a string "false" is truthy, and made an answered question unanswerable."""
    value = obj.get(key, False)
    if value is False or (type(value) is int and value in (0, 1)):
        return bool(value)
    return _field(obj, key, where, bool)


def _squad_rows(doc) -> list[dict]:
    rows = []
    for i, article in enumerate(_field(doc, "data", "the top level")):
        for j, para in enumerate(_field(article, "paragraphs", f"data[{i}]")):
            where = f"data[{i}].paragraphs[{j}]"
            context = _text(para, "context", where)
            for k, qa in enumerate(_field(para, "qas", where)):
                at = f"{where}.qas[{k}]"
                qid, question = _field(qa, "id", at, None), _text(qa, "question", at)
                impossible = _flag(qa, "is_impossible", at)
                answers = [] if impossible else _field(qa, "answers", at)
                spans = [(_field(a, "text", f"{at}.answers[{m}]", str), _field(a, "answer_start", f"{at}.answers[{m}]",
                                                                            None)) for m, a in enumerate(answers)]
                rows.append(_row(qid, context, question, [t for t, _ in spans], [s for _, s in spans],
                                 article.get("title", "")))
    return rows


def _read_squad_json(path: str) -> list[dict]:
    try:
        return _squad_rows(unique_names.loads(utf8_text(Path(path))))
    except unique_names.RepeatedKey as e:
        raise DataError(f"{path}:{e.line}: the object at column {e.column} gives the key {short(e.key, 60)} twice; "
                        f"{unique_names.UNIQUE_KEYS}") from None
    except FileNotFoundError as e:
        raise DataError(f"SQuAD file not found: {resolved(path)}") from e
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e
    except _NotSquad as e:
        raise DataError(f"{path}: not in the SQuAD schema: {e}; expected {SQUAD_SCHEMA}") from None


def load_squad_json(train: str, validation: str, test: str | None = None, *, name: str | None = None,
                    holdout: str = "encoderlab", fingerprint: str = "") -> QATask:
    """SQuAD-format files; without `test`, test = `validation` and validation = 5% of train (`holdout`: whole
    articles, or the authors' train_test_split)."""
    rows = {"train": _read_squad_json(train), "validation": _read_squad_json(validation)}
    if test is not None:
        rows["test"] = _read_squad_json(test)
    stem = Path(train).stem
    name = name or (Path(train).parent.name if stem in ("train", "training") else stem)
    if test is None:
        rows["test"] = rows["validation"]
        given = rows["train"]
        rows["train"], rows["validation"] = split_validation(given, holdout, hold_out_articles)
        if given and not rows["train"]:
            raise DataError(f"QA task {name!r}: {train} holds {len({_group(r) for r in given})} article(s) "
                            f"({len(given)} questions); without a test file, {validation} is the test set and "
                            "validation is held out of train as whole articles (5%, at least one), which left "
                            f"none to train on: add a test file (`test:`) or more articles to {train}")
    unanswerable = any(not r["answers"]["text"] for split in rows.values() for r in split)
    # without a test file, validation is held out of train and the validation file is the test set
    files = {"train": train, "validation": validation if test is not None else train, "test": test or validation}
    return QATask(name, rows, allow_unanswerable=unanswerable, fingerprint=fingerprint, files=files)
