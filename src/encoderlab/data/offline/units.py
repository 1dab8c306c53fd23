"""What every builder of the offline suite shares: split assignment by source unit, the task record, the
classification recipe, CoNLL detokenisation and writing a task folder in the one task-file format (taskfiles.py).
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from encoderlab.data import decontaminate
from encoderlab.data.offline.taskfiles import SPLITS, write_task_folder

SPLIT_SEED = 1234
FRACTIONS = {"validation": 0.1, "test": 0.1}
RECIPE_VERSION = 4  # bump when a change alters the built files, so stale builds are rebuilt


@dataclass
class Task:
    name: str
    family: str  # "classification" | "tokens" (qa and retrieval come with the evaluation harness)
    description: str
    labels: list[str]
    splits: dict[str, list[dict]] = field(default_factory=dict)
    text_fields: tuple[str, ...] = ("text",)

    def eval_texts(self) -> list[str]:
        out = []
        for split in ("validation", "test"):
            for ex in self.splits[split]:
                out.append(" ".join(ex["tokens"]) if "tokens" in ex else ex["text"])
        return out


def stable_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def assign_splits(keys: list[str], strata: list[str], seed: int = SPLIT_SEED) -> dict[str, str]:
    """Map each key to a split: per stratum, keys sorted (input order does not matter), then a seeded shuffle."""
    by_stratum: dict[str, list[str]] = {}
    for key, stratum in zip(keys, strata):
        by_stratum.setdefault(stratum, []).append(key)
    out = {}
    for stratum in sorted(by_stratum):
        members = sorted(set(by_stratum[stratum]))
        salt = int(stable_key(stratum)[:8], 16)
        order = np.random.default_rng([seed, salt]).permutation(len(members))
        n_test = round(FRACTIONS["test"] * len(members))
        n_val = round(FRACTIONS["validation"] * len(members))
        for rank, i in enumerate(order):
            out[members[i]] = "test" if rank < n_test else "validation" if rank < n_test + n_val else "train"
    return out


def _dedupe_labelled(rows: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[str], int]:
    """Collapse texts that normalise alike (keeps one copy); drop those seen with different labels. Returns the kept
    rows, their normal forms and the number dropped."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for text, label in rows:
        groups.setdefault(decontaminate.normalize(text), []).append((text, label))
    kept, norms, dropped = [], [], 0
    for norm, members in groups.items():
        if len({label for _, label in members}) == 1:
            kept.append(members[0])
            norms.append(norm)
        dropped += len(members) - (1 if len({label for _, label in members}) == 1 else 0)
    return kept, norms, dropped


def classification_task(name, description, labels, rows, source) -> Task:
    rows, norms, dropped = _dedupe_labelled(rows)
    keys = [stable_key(norm) for norm in norms]
    split_of = assign_splits(keys, [labels[y] for _, y in rows])
    task = Task(name, "classification", description, labels, {s: [] for s in SPLITS})
    for key, (text, label) in sorted(zip(keys, rows)):
        task.splits[split_of[key]].append({"id": f"{source}-{key[:12]}", "text": text, "label": label})
    task.description += f" Duplicates removed: {dropped}."
    return task


_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}]|'s|'re|'ve|'ll|'d|n't)")
_NO_SPACE_AFTER = re.compile(r"([(\[{$]) ")


def detokenize(tokens: list[str]) -> str:
    """CoNLL tokens back to running text, for the corpus (the tasks keep the tokens)."""
    return _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", " ".join(tokens)))


def task_stats(task: Task) -> dict:
    stats: dict = {"name": task.name, "family": task.family, "labels": task.labels, "splits": {}}
    for split, examples in task.splits.items():
        if task.family == "tokens":
            tags = Counter(task.labels[t] for ex in examples for t in ex["tags"])
            stats["splits"][split] = {"examples": len(examples), "tokens": sum(tags.values()),
                                      "tag_distribution": dict(sorted(tags.items()))}
        else:
            labels = Counter(task.labels[ex["label"]] for ex in examples)
            n_words = [len(ex["text"].split()) for ex in examples]
            stats["splits"][split] = {"examples": len(examples), "label_distribution": dict(sorted(labels.items())),
                                      "mean_words": round(float(np.mean(n_words)), 1) if n_words else 0}
    return stats


def write_task(task: Task, root: Path) -> dict:
    stats = task_stats(task)
    write_task_folder(root, {"name": task.name, "family": task.family, "description": task.description,
                             "labels": task.labels, "text_fields": list(task.text_fields), "split_seed": SPLIT_SEED,
                             "fractions": FRACTIONS, "recipe": RECIPE_VERSION},
                      stats, splits={split: task.splits[split] for split in SPLITS})
    return stats
