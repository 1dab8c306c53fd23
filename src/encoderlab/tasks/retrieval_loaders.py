"""Loading retrieval sets: folders in the BEIR layout (the offline suite's and local copies) and the paper's sets
(MS MARCO, NQ, MLDR) from the Hugging Face Hub or a local copy. One reachability check for all (`common.check_hub`),
so an offline machine fails in seconds with one line saying which local layout to give instead."""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from encoderlab.core.errors import DataError
from encoderlab.core.io import numbered_jsonl, text_lines
from encoderlab.data.offline.taskfiles import read_task
from encoderlab.tasks.common import check_hub
from encoderlab.tasks.retrieval import RetrievalTask, Split

HUB_IDS = {"msmarco": "BeIR/msmarco", "nq": "BeIR/nq", "mldr": "hgissbkh/mldr-en"}
# The authors train retrieval on these pairs (one relevant passage text per query), not on BeIR's train qrels
HUB_TRAIN_PAIRS = {"msmarco": "hgissbkh/msmarco-pairs"}
# MLDR hub copies: (corpus config, queries config, hub split of each of our splits). The authors' mldr-en has no train
MLDR_SCHEMAS = {"hgissbkh/mldr-en": ("corpus", "default", {"validation": "dev", "test": "test"}),
                "Shitao/MLDR": ("corpus-en", "en", {"train": "train", "validation": "dev", "test": "test"})}
# NQ has test judgements only: its test queries are halved into validation and test. The authors drew their halves
# with no seed, so theirs cannot be reproduced; this one is fixed (docs/paper.md).
NQ_SPLIT_SEED = 42


def halve_split(qrels: dict[str, Split], queries: dict[str, str], seed: int = NQ_SPLIT_SEED, source: str = "test"
               ) -> tuple[dict[str, Split], dict]:
    """Half of the `source` split's queries become validation and the rest test, as EncodEval's
    `split_retrieval_dataset(train_size=0.5, seed)`: `random.seed(seed)`, then `random.sample` of round(half) of the
    sorted distinct query texts (queries sharing a text stay together). Returns the qrels and the description of the
    split that records keep."""
    judged = qrels[source]
    texts = sorted({queries[q] for q in judged})
    picked = set(random.Random(seed).sample(texts, round(0.5 * len(texts))))
    halves = {"validation": {q: r for q, r in judged.items() if queries[q] in picked},
              "test": {q: r for q, r in judged.items() if queries[q] not in picked}}
    note = {"validation": f"half of the {source} queries", "test": "the other half", "seed": seed,
            "queries": {s: len(h) for s, h in halves.items()}}
    return {**{s: j for s, j in qrels.items() if s not in ("validation", "test")}, **halves}, note


def evaluation_splits(qrels: dict[str, Split], queries: dict[str, str], where) -> tuple[dict[str, Split], dict | None]:
    """The qrels with both a validation and a test split, and the note of how they were made (None: as given). With
    only one of them (BeIR's NQ has test qrels only), that one's queries are halved (`halve_split`)."""
    evaluated = [s for s in ("validation", "test") if s in qrels]
    if not evaluated:
        raise DataError(f"{where}: train qrels only; a retrieval task is scored on validation (dev.tsv) and test "
                        "(test.tsv) qrels: give at least one of them")
    if len(evaluated) == 2:
        return qrels, None
    return halve_split(qrels, queries, source=evaluated[0])


def load_hub_retrieval(kind: Literal["msmarco", "nq", "mldr"], source: str | None = None, *, fingerprint: str = ""
                       ) -> RetrievalTask:
    """MS MARCO or NQ (BEIR schema: `ID` corpus/queries + `ID-qrels`) or MLDR (English), from the hub or a folder.

    `source` is a local BEIR-layout folder or a hub id (default `HUB_IDS[kind]`). From the hub, MS MARCO's train
    split is the authors' pairs (`HUB_TRAIN_PAIRS`). BeIR's NQ has test qrels only: its test queries are halved
    (`evaluation_splits`, seed NQ_SPLIT_SEED, kept in `data_split`).
    """
    if kind not in HUB_IDS:
        raise DataError(f"unknown retrieval dataset {kind!r}; known: {', '.join(HUB_IDS)}")
    pair_docs: set[str] = set()
    if source and Path(source).exists():
        corpus, queries, qrels, files = _read_beir(Path(source))
    else:
        hub_id = source or HUB_IDS[kind]
        corpus, queries, qrels = _hub_retrieval(kind, hub_id)
        files = {"corpus": hub_id, "queries": hub_id}
        if kind in HUB_TRAIN_PAIRS:
            pair_docs = _add_pairs(kind, corpus, queries, qrels)
            files["train"] = f"{HUB_TRAIN_PAIRS[kind]} (train pairs)"
    qrels, note = evaluation_splits(qrels, queries, source or HUB_IDS[kind])
    return RetrievalTask(kind, corpus, queries, qrels, files={k: str(v) for k, v in files.items()},
                         pairs_only=pair_docs, data_split=note, fingerprint=fingerprint)


def _hub_retrieval(kind: str, hub_id: str) -> tuple[dict, dict, dict]:
    """(corpus, queries, qrels) of a paper retrieval set on the hub (BEIR schema, or MLDR's)."""
    check_hub(hub_id, f"the BEIR layout (corpus.jsonl, queries.jsonl, qrels/{{train,dev,test}}.tsv), e.g. "
                      f"`{kind}=/path/to/folder`")
    try:
        import datasets  # deferred: heavy, and only hub ids need it

        if kind == "mldr":
            return _hub_mldr(datasets, hub_id)
        corpus = _hub_by_id(datasets.load_dataset(hub_id, "corpus", split="corpus"), "_id", hub_id,
                            lambda r: {"title": r["title"], "text": r["text"]})
        queries = _hub_by_id(datasets.load_dataset(hub_id, "queries", split="queries"), "_id", hub_id,
                             lambda r: r["text"])
        qrels = {}
        for split, rows in datasets.load_dataset(f"{hub_id}-qrels").items():
            if split == "train" and kind in HUB_TRAIN_PAIRS:  # the authors train on their own pairs instead
                continue
            for r in rows:
                qrels.setdefault("validation" if split == "dev" else split, {}).setdefault(
                    str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
    except DataError:
        raise
    except Exception as e:
        raise _unreachable(kind, hub_id, f"{type(e).__name__}: {e}") from e
    return corpus, queries, qrels


def _hub_by_id(rows, key: str, hub_id: str, value: Callable[[dict], object]) -> dict[str, object]:
    """{id as text: value(row)} of a Hub corpus or queries split, refusing an id given twice as `_by_id` does for a
    local folder: a dict built from the rows would keep the last and drop the other without a word. The rows are read
    again only to name the first of a pair, so a corpus of millions holds one dict, not a second of row numbers."""
    out: dict[str, object] = {}
    for row_no, row in enumerate(rows):
        if (ident := str(row[key])) in out:
            first = next(n for n, r in enumerate(rows) if str(r[key]) == ident)
            raise DataError(f"{hub_id}: row {row_no}: the {key} {ident!r} occurs twice (also row {first}): "
                            "a corpus or query set must give each entry one id")
        out[ident] = value(row)
    return out


def _hub_mldr(datasets, hub_id: str) -> tuple[dict, dict, dict]:
    """MLDR's corpus {docid, text} and query rows {query_id, query, positive_passages: [{docid}]}."""
    corpus_config, queries_config, splits = MLDR_SCHEMAS.get(hub_id, MLDR_SCHEMAS[HUB_IDS["mldr"]])
    corpus = _hub_by_id(datasets.load_dataset(hub_id, corpus_config, split="corpus"), "docid", hub_id,
                        lambda r: {"title": "", "text": r["text"]})
    queries, qrels = {}, {}
    for split, hub_split in splits.items():
        for r in datasets.load_dataset(hub_id, queries_config, split=hub_split):
            queries[r["query_id"]] = r["query"]
            qrels.setdefault(split, {})[r["query_id"]] = {str(p["docid"]): 1 for p in r["positive_passages"]}
    return corpus, queries, qrels


def _add_pairs(kind: str, corpus: dict, queries: dict, qrels: dict) -> set[str]:
    """The authors' training pairs, given as texts ({query, positive}), become the train split under ids of their own
    ("pair-q-N", "pair-d-N"); returns those documents, which are never searched (they are not the split's corpus)."""
    hub_id = HUB_TRAIN_PAIRS[kind]
    try:
        import datasets  # deferred: heavy, and only hub ids need it

        rows = datasets.load_dataset(hub_id, split="train")
        train = qrels["train"] = {f"pair-q-{i}": {f"pair-d-{i}": 1} for i in range(len(rows))}
        for i, r in enumerate(rows):
            queries[f"pair-q-{i}"], corpus[f"pair-d-{i}"] = r["query"], {"title": "", "text": r["positive"]}
    except Exception as e:
        raise _unreachable(kind, hub_id, f"{type(e).__name__}: {e}") from e
    return {d for rel in train.values() for d in rel}


def _unreachable(kind: str, hub_id: str, reason: str) -> DataError:
    reason = " ".join(reason.split())[:200]
    return DataError(f"{kind}: cannot load {hub_id!r} from the Hugging Face Hub ({reason}); give a local folder in "
                     f"the BEIR layout instead (corpus.jsonl, queries.jsonl, qrels/{{train,dev,test}}.tsv), "
                     f"e.g. `{kind}=/path/to/folder`")


def _qrels_tsv(path: Path) -> Split:
    """The judgements of a qrels file; a pair judged twice alike is one judgement, judged twice differently is
    refused naming both lines (keeping either would silently change what the query is scored against)."""
    out: Split = {}
    first: dict[tuple[str, str], int] = {}
    for line_no, line in enumerate(text_lines(path), start=1):
        cols = line.split("\t")
        if not line.strip() or (line_no == 1 and cols[-1].strip().lower() == "score"):
            continue
        if len(cols) != 3 or not cols[2].strip().lstrip("-").isdigit():
            raise DataError(f"{path}:{line_no}: expected 'query-id<TAB>corpus-id<TAB>integer score', got {line!r}")
        query, doc, score = cols[0].strip(), cols[1].strip(), int(cols[2])
        judged = out.setdefault(query, {})
        if doc in judged and judged[doc] != score:
            raise DataError(f"{path}:{line_no}: query {query!r} and document {doc!r} are judged {score} here and "
                            f"{judged[doc]} on line {first[query, doc]}: give each pair one score")
        judged[doc] = score
        first.setdefault((query, doc), line_no)
    return out


def load_beir(folder: str | Path, name: str | None = None, *, fingerprint: str = "", own_train_split: bool = False
              ) -> RetrievalTask:
    """A BEIR-layout folder: corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv (dev is validation).

    Without qrels/train.tsv the task is zero-shot only (`has_train` is False). With only one of dev and test, that
    split's queries are halved into validation and test (`evaluation_splits`, kept in `data_split`), as NQ's are.
    `own_train_split`: a user's own set that trains on its train qrels (tasks.trains_on_its_own).
    """
    folder = Path(folder)
    corpus, queries, qrels, files = _read_beir(folder)
    qrels, note = evaluation_splits(qrels, queries, folder)
    if note is not None:  # both halves come from the one file there was
        source = files.pop("validation" if "validation" in files else "test")
        files.update(validation=source, test=source)
    return RetrievalTask(name or folder.name, corpus, queries, qrels, files={k: str(v) for k, v in files.items()},
                         data_split=note, fingerprint=fingerprint, own_train_split=own_train_split)


def _read_beir(folder: Path) -> tuple[dict, dict, dict, dict]:
    """(corpus, queries, qrels, the files read) of a BEIR-layout folder."""
    files = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl"}
    for path in files.values():
        if path.exists() and not path.is_file():  # a folder, or a link to a device that would never end
            raise DataError(f"{folder} is not a BEIR-layout folder: {path.name} is not a file (it leads to "
                            f"{path.resolve()})")
        if not path.is_file():
            raise DataError(f"{folder} is not a BEIR-layout folder: {path.name} is missing (expected corpus.jsonl, "
                            "queries.jsonl, qrels/{train,dev,test}.tsv)")
    for split, names in (("train", ("train",)), ("validation", ("dev", "validation")), ("test", ("test",))):
        found = [folder / "qrels" / f"{n}.tsv" for n in names if (folder / "qrels" / f"{n}.tsv").is_file()]
        if len(found) > 1:
            raise DataError(f"{folder}/qrels holds both dev.tsv and validation.tsv: keep one")
        if found:
            files[split] = found[0]
    if len(files) == 2:
        raise DataError(f"{folder}/qrels holds none of train.tsv, dev.tsv (or validation.tsv), test.tsv")
    corpus = {i: {"title": r.get("title") or "", "text": r.get("text") or ""} for i, r in _by_id(files["corpus"])}
    queries = {i: r["text"] for i, r in _by_id(files["queries"])}
    qrels = {split: _qrels_tsv(path) for split, path in files.items() if split not in ("corpus", "queries")}
    return corpus, queries, qrels, files


def _by_id(path: Path) -> Iterator[tuple[str, dict]]:
    """(id as text, row) of each row of a BEIR corpus or queries file; an id given twice (`1` and `"1"` are one id:
    qrels name ids as text) is refused naming both lines, since keeping either row would silently drop the other."""
    first: dict[str, int] = {}
    for line_no, row in numbered_jsonl(path, ("_id", "text")):
        key = str(row["_id"])
        if key in first:
            raise DataError(f"{path}:{line_no}: the _id {key!r} occurs twice in the file (also on line "
                            f"{first[key]}): give each {'document' if path.name.startswith('corpus') else 'query'} "
                            "one id")
        first[key] = line_no
        yield key, row


def load_offline_retrieval(root: Path, name: str, *, fingerprint: str = "") -> RetrievalTask:
    """A retrieval task of the offline suite (`encoderlab data prepare offline`), written by data/offline/ir.py."""
    folder, _ = read_task(root, name, "retrieval")
    return load_beir(folder, name, fingerprint=fingerprint)
