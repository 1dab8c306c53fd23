"""The offline suite's retrieval datasets, written in the BEIR layout (docs/tasks/retrieval.md).

    root/<name>/corpus.jsonl            {"_id", "title", "text"}
    root/<name>/queries.jsonl           {"_id", "text"}
    root/<name>/qrels/{train,validation,test}.tsv   query-id, corpus-id, score (header line)
    root/<name>/stats.json, task.json

A query's split is the split of its source unit (the Wikipedia article, the IMDB review), the same assignment
as every other offline task, so validation and test queries and their relevant documents come from units that the
pretraining corpus never holds. The retrieval corpus itself holds every document of the source, train ones too:
those act as distractors (they were seen in pretraining, as MS MARCO's passages may be seen by a web-pretrained
model), and the corpus stays the same for every split.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from encoderlab.core.errors import DataError
from encoderlab.core.io import write_jsonl
from encoderlab.data import decontaminate
from encoderlab.data.offline.taskfiles import SPLITS, write_task_folder
from encoderlab.data.offline.units import stable_key

RECIPE = 1  # bump when a change alters the built files
LONG_MIN_WORDS = 400  # a review this long is longer than a 512-token window of the default BPE
QUERY_WORDS = (12, 60)  # the sentence taken out of a long review as its query
QUERY_SEED = 4321
QUERIES_PER_REVIEW = 3  # queries share their review: the test set triples, documents lose ~13%

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(A-Z0-9])")


def _wiki_id(title: str) -> str:
    return f"wiki-{stable_key(title)[:12]}"


def _unique(ids: list[str], what: str) -> None:
    dup = [i for i, n in Counter(ids).items() if n > 1]
    if dup:
        raise DataError(f"{what}: identifiers collide ({', '.join(dup[:5])}); the source has duplicate keys")


class _Dataset:
    """One retrieval dataset being built: corpus, queries, qrels per split, and how it was made."""

    def __init__(self, name: str, description: str, construction: str) -> None:
        self.name, self.description, self.construction = name, description, construction
        self.corpus: list[dict] = []
        self.queries: list[dict] = []
        self.qrels: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
        self.dropped: dict[str, int] = {}

    def eval_texts(self) -> list[str]:
        """Validation and test queries and their relevant documents."""
        text_of_query = {q["_id"]: q["text"] for q in self.queries}
        text_of_doc = {d["_id"]: d["text"] for d in self.corpus}
        out = []
        for split in ("validation", "test"):
            for qid, did in self.qrels[split]:
                out += [text_of_query[qid], text_of_doc[did]]
        return out

    def stats(self) -> dict:
        words = {d["_id"]: len(f"{d['title']} {d['text']}".split()) for d in self.corpus}
        query_words = {q["_id"]: len(q["text"].split()) for q in self.queries}
        per_split = {}
        for split, pairs in self.qrels.items():
            qids = sorted({q for q, _ in pairs})
            per_split[split] = {
                "queries": len(qids), "qrels": len(pairs),
                "mean_query_words": round(float(np.mean([query_words[q] for q in qids])), 1) if qids else 0.0,
                "mean_relevant_doc_words": round(float(np.mean([words[d] for _, d in pairs])), 1) if pairs else 0.0,
            }
        return {"name": self.name, "family": "retrieval", "corpus_documents": len(self.corpus),
                "mean_doc_words": round(float(np.mean(list(words.values()))), 1),
                "max_doc_words": max(words.values()), "queries": len(self.queries), "splits": per_split,
                "dropped": self.dropped}

    def _write_beir(self, folder: Path) -> None:
        write_jsonl(folder / "corpus.jsonl", self.corpus)
        write_jsonl(folder / "queries.jsonl", self.queries)
        (folder / "qrels").mkdir()
        for split, pairs in self.qrels.items():
            lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, d in pairs]
            (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def write(self, root: Path) -> dict:
        _unique([d["_id"] for d in self.corpus], f"{self.name} corpus")
        _unique([q["_id"] for q in self.queries], f"{self.name} queries")
        stats = self.stats()
        write_task_folder(root, {"name": self.name, "family": "retrieval", "description": self.description,
                                 "construction": self.construction, "recipe": RECIPE}, stats,
                          write_data=self._write_beir)
        return stats


# ----------------------------------------------------------------------------------------------- Wikipedia


def _articles(raw: dict) -> list[tuple[dict, str]]:
    split_of = raw["units"]["wikipedia"]
    out = []
    for a in sorted(raw["wiki"], key=lambda a: a["title"]):
        if a["title"] not in split_of:
            raise DataError(f"Wikipedia article {a['title']!r} has no split in raw['units']['wikipedia']")
        out.append((a, split_of[a["title"]]))
    return out


def wiki_description(raw: dict) -> _Dataset:
    ds = _Dataset(
        "wiki-description",
        "Wikipedia short description -> the article's lead section, among the leads of all 10,033 Level-4 vital "
        "articles.",
        "Query: the article's short description (e.g. 'Scottish economist and philosopher (1723-1790)'); relevant "
        "document: its lead section (title + extract); corpus: the leads of every article, whatever its split. "
        "A query's split is its article's split (the split of every offline task built on the article). Empty "
        "descriptions and descriptions shared by several articles (e.g. 'Family of birds') are dropped as queries: "
        "a shared one has no single answer and its articles can lie in different splits. Their leads stay in the "
        "corpus as distractors.")
    articles = _articles(raw)
    counts = Counter((a.get("description") or "").strip() for a, _ in articles)
    for a, split in articles:
        did = _wiki_id(a["title"])
        ds.corpus.append({"_id": did, "title": a["title"], "text": a["extract"].strip()})
        description = (a.get("description") or "").strip()
        if not description:
            ds.dropped["empty_description"] = ds.dropped.get("empty_description", 0) + 1
        elif counts[description] > 1:
            ds.dropped["shared_description"] = ds.dropped.get("shared_description", 0) + 1
        else:
            qid = "desc-" + did.removeprefix("wiki-")
            ds.queries.append({"_id": qid, "text": description})
            ds.qrels[split].append((qid, did))
    return ds


def wiki_title(raw: dict) -> _Dataset:
    ds = _Dataset(
        "wiki-title",
        "Wikipedia article title -> its lead section (a zero-shot set: evaluate a model fine-tuned on "
        "wiki-description).",
        "Query: the article's title; relevant document: its lead section, stored without the title field (the "
        "title is the query, it would be a verbatim copy of it; the lead usually names its subject anyway); "
        "corpus: the leads of every article. Splits follow the article, as in wiki-description, so the "
        "validation/test articles are the same unseen articles in both sets. Train qrels are provided so the set "
        "also works as a standalone task; the paper-like zero-shot protocol fine-tunes on wiki-description's "
        "train pairs and scores this set's validation/test queries.")
    for a, split in _articles(raw):
        did = _wiki_id(a["title"])
        ds.corpus.append({"_id": did, "title": "", "text": a["extract"].strip()})
        qid = "title-" + did.removeprefix("wiki-")
        ds.queries.append({"_id": qid, "text": a["title"]})
        ds.qrels[split].append((qid, did))
    return ds


# ----------------------------------------------------------------------------------------------- IMDB


def _without(lines: list[list[str]], removed: set[tuple[int, int]]) -> str:
    kept = (" ".join(s for si, s in enumerate(line) if (li, si) not in removed) for li, line in enumerate(lines))
    return "\n".join(x for x in kept if x)


def take_sentences(text: str, seed_key: str, k: int = QUERIES_PER_REVIEW,
                   elsewhere: Callable[[str], bool] = lambda sentence: False) -> tuple[list[str], str]:
    """(up to k query sentences, the review without them); drawn with a seed that depends on the review only.

    Sentences are a review's lines (paragraphs) cut after . ! ? when a capital, digit or quote follows. Eligible:
    QUERY_WORDS long, not `elsewhere` (in another document) and not repeated in the review itself: a query is never
    a verbatim part of any document, compared on the normalised words.
    """
    lines = [[s.strip() for s in _SENTENCE_END.split(line) if s.strip()] for line in text.split("\n")]
    slots = [(li, si) for li, line in enumerate(lines) for si, s in enumerate(line)
             if QUERY_WORDS[0] <= len(s.split()) <= QUERY_WORDS[1] and not elsewhere(s)]
    rng = np.random.default_rng([QUERY_SEED, int(seed_key[:8], 16)])
    chosen = [slots[i] for i in rng.permutation(len(slots))[: 2 * k]]  # random order (no position bias), spares
    norm = decontaminate.normalize
    picked: list[tuple[int, int]] = []
    for slot in chosen:
        if len(picked) == k:
            break
        rest = f" {norm(_without(lines, set(picked) | {slot}))} "
        if all(f" {norm(lines[li][si])} " not in rest for li, si in picked + [slot]):
            picked.append(slot)
    return [lines[li][si] for li, si in sorted(picked)], _without(lines, set(picked))


def _reviews_holding(norm: dict[str, str]) -> Callable[[list[str]], set[str]]:
    """words -> the reviews (ids of `norm`, normalised texts) whose words include the first NGRAM of them: every
    review that can hold them, and with a negligible chance of a hash collision one more, which the caller's exact
    comparison turns away. No review for fewer words."""
    ids = list(norm)
    grams = [decontaminate.ngram_hashes(text.split()) for text in norm.values()]
    owner = np.concatenate([np.full(len(g), i) for i, g in enumerate(grams)] or [np.empty(0, dtype=np.int64)])
    hashes = np.concatenate(grams or [np.empty(0, dtype=np.uint64)])
    order = np.argsort(hashes, kind="stable")
    hashes, owner = hashes[order], owner[order]

    def holding(words: list[str]) -> set[str]:
        first = decontaminate.first_ngram_hash(words)
        if first is None:
            return set()
        lo, hi = hashes.searchsorted(np.uint64(first), "left"), hashes.searchsorted(np.uint64(first), "right")
        return {ids[i] for i in owner[lo:hi]}
    return holding


def imdb_long(raw: dict) -> _Dataset:
    ds = _Dataset(
        "imdb-long",
        f"A sentence of an IMDB review -> the review it was taken from (long documents, >= {LONG_MIN_WORDS} words).",
        f"Reviews of at least {LONG_MIN_WORDS} words (after the de-duplication of imdb-polarity) form the corpus. "
        f"From each, up to {QUERIES_PER_REVIEW} sentences of {QUERY_WORDS[0]}-{QUERY_WORDS[1]} words that do not "
        f"occur elsewhere in the review are drawn (seed {QUERY_SEED} mixed with the review's hash, so independent "
        "of file order) and removed: each sentence is a query, the review without them the relevant document, so "
        "the answer is never a verbatim copy and must be recognised from the rest of the review (plot, names, "
        "opinion). Sentences come from anywhere in the review: a window shorter than the review sees only part of "
        "the evidence. A query's split is its review's split in imdb-polarity; documents have no title.")
    # imdb-polarity's own rows and seeded stratified split, so held-out reviews here are held-out reviews there,
    # absent from the pretraining corpus.
    polarity = raw["imdb_polarity"]
    reviews = [(split, ex) for split in SPLITS for ex in polarity.splits[split]]
    long = [(split, ex) for split, ex in reviews if len(ex["text"].split()) >= LONG_MIN_WORDS]
    # Near-duplicate reviews (one author posting twice) share sentences: such a sentence is no query.
    norm = {ex["id"]: f" {decontaminate.normalize(ex['text'])} " for _, ex in long}
    holding = _reviews_holding(norm)

    def in_other_review(rid: str, sentence: str) -> bool:
        words = decontaminate.normalize(sentence)
        return any(f" {words} " in norm[other] for other in holding(words.split()) - {rid})

    no_sentence = 0
    for split, ex in long:
        key = ex["id"].removeprefix("imdb-")
        queries, document = take_sentences(ex["text"], key,
                                           elsewhere=lambda s, rid=ex["id"]: in_other_review(rid, s))
        if not queries:
            no_sentence += 1
            continue
        ds.corpus.append({"_id": ex["id"], "title": "", "text": document})
        for i, query in enumerate(queries):
            ds.queries.append({"_id": f"imdbq-{key}-{i}", "text": query})
            ds.qrels[split].append((f"imdbq-{key}-{i}", ex["id"]))
    ds.corpus.sort(key=lambda d: d["_id"])
    ds.queries.sort(key=lambda q: q["_id"])
    for pairs in ds.qrels.values():
        pairs.sort()
    ds.dropped = {"reviews_shorter_than_min_words": len(reviews) - len(long),
                  "reviews_without_eligible_sentence": no_sentence}
    return ds


# ----------------------------------------------------------------------------------------------- entry point


DATASETS: dict[str, Callable[[dict], _Dataset]] = {"wiki-description": wiki_description, "wiki-title": wiki_title,
                                                   "imdb-long": imdb_long}


def build_ir_tasks(raw: dict, root: Path) -> tuple[dict[str, dict], list[str]]:
    """Write wiki-description, wiki-title and imdb-long under `root`.

    `raw` is the second value of `build.build_tasks`. Returns (stats per task, the validation and test texts:
    queries and relevant documents, sorted and de-duplicated) so the caller can prove them absent from the
    pretraining corpus.
    """
    stats, texts = {}, set()
    for name in DATASETS:
        one, its_texts = build_ir_task(name, raw, root)
        stats.update(one)
        texts.update(its_texts)
    return stats, sorted(texts)


def build_ir_task(name: str, raw: dict, root: Path,
                  before_write: Callable[[], None] = lambda: None) -> tuple[dict[str, dict], list[str]]:
    """Write the retrieval dataset `name` (a key of DATASETS) under `root`, calling `before_write()` first; return
    ({name: stats}, its validation and test queries and relevant documents). Each dataset on its own, so that two
    processes can share them (jobs.py)."""
    ds = DATASETS[name](raw)
    for split in ("validation", "test"):
        if not ds.qrels[split]:
            raise DataError(f"retrieval dataset {ds.name}: no {split} queries (is the source too small?)")
    before_write()
    return {ds.name: ds.write(root)}, ds.eval_texts()
