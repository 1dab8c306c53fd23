"""The authors' retrieval protocol: binary NDCG, judged-document corpora, the cosine x 20 loss, and the paper loaders
(msmarco, nq, mldr) on fixtures in the schema of their Hub datasets (datasets.load_dataset is replaced: no network)."""
from __future__ import annotations

import math
import random

import datasets
import pytest
import torch
import torch.nn.functional as F
from test_task_retrieval import backbone, make_data, tok  # noqa: F401 - tok is a fixture

from encoderlab.core.errors import DataError
from encoderlab.tasks import retrieval_loaders as loaders
from encoderlab.tasks import bi_encoder as B
from encoderlab.tasks import retrieval as R

pytestmark = pytest.mark.usefixtures("one_thread")


def test_binary_relevance_ndcg_by_hand():
    qrels = {"q": {"a": 2, "b": 1, "c": 0}}
    run = {"q": {"b": 3.0, "x": 2.0, "a": 1.0}}  # ranks: b, x, a
    binary = 1 + 1 / math.log2(4)  # gains 1, 0, 1
    ideal = 1 + 1 / math.log2(3)
    assert R._scores(run, qrels, binary=True)["ndcg@10"] == pytest.approx(100 * binary / ideal)  # 91.97
    graded = (1 + 2 / math.log2(4)) / (2 + 1 / math.log2(3))
    assert R._scores(run, qrels)["ndcg@10"] == pytest.approx(100 * graded)  # 76.02: grades as gains


def test_judged_corpus_is_the_documents_of_the_split_judgements(tok):  # noqa: F811
    corpus, queries, qrels = make_data(n_docs=30)
    qrels["validation"]["q8"]["d20"] = 0  # judged not relevant: searched all the same
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.configure(corpus="judged", relevance="binary", loss="mnrl")
    task.prepare(tok, max_length=64)
    assert task.searched_documents("validation") == 4 and task.searched_documents("test") == 2
    run = task.search(backbone(tok), "validation", batch_size=4)
    assert {d for r in run.values() for d in r} == {"d8", "d9", "d10", "d20"}
    picked = R.RetrievalTask.trivial_baseline(task, "test")
    assert 0 < picked["score"] <= 100
    task.configure(corpus="all", relevance="graded", loss="infonce")
    assert task.searched_documents("validation") == 30


def test_mnrl_is_cosine_times_20_over_the_batch_with_nothing_masked(tok):  # noqa: F811
    corpus, queries, qrels = make_data()
    qrels["train"]["q0"]["d1"] = 1  # q0's batch neighbour d1 is relevant to it: infonce masks it, mnrl does not
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.configure(corpus="all", relevance="binary", loss="mnrl")
    task.prepare(tok, max_length=64)
    head = task.make_head(32, torch.Generator())
    assert list(head.parameters()) == []
    batch = next(task.train_batches(8, seed=0))
    assert "false_negatives" not in batch
    model = backbone(tok)
    q = B.encode(model, batch["query_ids"], batch["query_mask"])
    d = B.encode(model, batch["doc_ids"], batch["doc_mask"])
    logits = 20 * F.normalize(q, dim=-1) @ F.normalize(d, dim=-1).T
    expected = F.cross_entropy(logits, torch.arange(len(q)))
    assert task.loss(model, head, batch).item() == pytest.approx(expected.item(), rel=1e-5)


# ------------------------------------------------------------------------- the paper loaders, Hub schemas


def _beir(n_docs: int, n_queries: int, qrel_splits: dict[str, range]) -> dict:
    rng = random.Random(0)
    corpus = datasets.Dataset.from_list([{"_id": f"d{i}", "title": f"T{i}", "text": f"doc {i} " * rng.randint(1, 4)}
                                         for i in range(n_docs)])
    queries = datasets.Dataset.from_list([{"_id": f"q{i}", "text": f"query number {i}"} for i in range(n_queries)])
    qrels = datasets.DatasetDict({s: datasets.Dataset.from_list(
        [{"query-id": f"q{i}", "corpus-id": f"d{i}", "score": 1} for i in ids]) for s, ids in qrel_splits.items()})
    return {"corpus": corpus, "queries": queries, "qrels": qrels}


def _mldr(corpus_config: str, queries_config: str, splits: tuple[str, ...]):
    """load_dataset of an MLDR copy: query rows with positive passages per split, and a corpus {docid, text}."""
    rows = {s: datasets.Dataset.from_list([
        {"query_id": f"{s}-{i}", "query": f"{s} question {i}",
         "positive_passages": [{"docid": f"doc-{s}-{i}", "text": "x", "title": ""}],
         "negative_passages": [{"docid": "doc-extra", "text": "y", "title": ""}]} for i in range(3)]) for s in splits}
    corpus = datasets.Dataset.from_list([{"docid": f"doc-{s}-{i}", "text": f"long document {s} {i}"}
                                         for s in splits for i in range(3)]
                                        + [{"docid": "doc-extra", "text": "an unjudged document"}])
    answers = {(corpus_config, "corpus"): corpus, **{(queries_config, s): rows[s] for s in splits}}
    return lambda name, split: answers[name, split]  # another config or split: KeyError


@pytest.fixture
def hub(monkeypatch):
    """datasets.load_dataset answering from in-memory fixtures in each Hub dataset's schema."""
    sets = {"BeIR/msmarco": _beir(12, 10, {"train": range(0, 6), "dev": range(6, 8), "test": range(8, 10)}),
            "BeIR/nq": _beir(12, 10, {"test": range(0, 10)})}
    mldr = {"hgissbkh/mldr-en": _mldr("corpus", "default", ("dev", "test")),
            "Shitao/MLDR": _mldr("corpus-en", "en", ("train", "dev", "test"))}
    pairs = datasets.DatasetDict({"train": datasets.Dataset.from_list(
        [{"query": f"pair question {i}", "positive": f"the passage answering {i}"} for i in range(4)])})

    def load_dataset(path, name=None, split=None, **kwargs):
        if path == "hgissbkh/msmarco-pairs":
            return pairs[split] if split else pairs
        if path in mldr:
            return mldr[path](name, split)
        if path.endswith("-qrels"):
            return sets[path.removesuffix("-qrels")]["qrels"]
        return sets[path][name]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(loaders, "check_hub", lambda *a, **k: None)


def test_msmarco_trains_on_the_authors_pairs_and_is_scored_on_beir_judgements(hub):
    task = loaders.load_hub_retrieval("msmarco")
    assert task.judged_splits == ["test", "train", "validation"] and task.has_train and task.data_split is None
    assert task.qrels["train"] == {f"pair-q-{i}": {f"pair-d-{i}": 1} for i in range(4)}  # not BeIR's train qrels
    texts = {task._query_source[q]: task._doc_texts[task._doc_index[d]]
             for q, rel in task.qrels["train"].items() for d in rel}
    assert texts["pair question 2"] == "Document: the passage answering 2"
    assert task.qrels["validation"] == {"q6": {"d6": 1}, "q7": {"d7": 1}}
    task.configure(corpus="judged", relevance="binary", loss="mnrl")
    assert task.searched_documents("validation") == 2 and task.searched_documents("test") == 2
    task.configure(corpus="all", relevance="binary", loss="mnrl")
    assert task.searched_documents("test") == 12  # BeIR's corpus: the pairs' passages are never searched
    task.limit_corpus(5, seed=0)
    assert task.searched_documents("test") == 5 and not any(
        task.doc_ids[i].startswith("pair-") for i in task._searched_in("test"))


def test_msmarco_from_a_local_beir_folder_keeps_its_own_train_qrels(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(f'{{"_id": "d{i}", "text": "doc {i}"}}\n' for i in range(4)))
    (tmp_path / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "query {i}"}}\n' for i in range(4)))
    for split, ids in (("train", (0, 1)), ("dev", (2,)), ("test", (3,))):
        (tmp_path / "qrels" / f"{split}.tsv").write_text("".join(f"q{i}\td{i}\t1\n" for i in ids))
    task = loaders.load_hub_retrieval("msmarco", str(tmp_path))
    assert task.qrels["train"] == {"q0": {"d0": 1}, "q1": {"d1": 1}} and task.searched_documents("test") == 4


def test_a_hub_msmarco_is_identified_with_its_training_pairs():
    from encoderlab.tasks import default_hub_id, task_identity
    from encoderlab.tasks.taskfile import paper_fingerprint

    assert default_hub_id("msmarco") == "BeIR/msmarco" and default_hub_id("mldr") == "hgissbkh/mldr-en"
    assert task_identity("msmarco")[1] == paper_fingerprint("msmarco", "BeIR/msmarco", "hgissbkh/msmarco-pairs")
    assert task_identity("msmarco")[1] != paper_fingerprint("msmarco", "BeIR/msmarco")  # the earlier BeIR train
    assert task_identity("nq")[1] == paper_fingerprint("nq", "BeIR/nq")


def test_nq_test_queries_halved_with_a_recorded_seed_as_encodeval_does(hub):
    task = loaders.load_hub_retrieval("nq")
    assert not task.has_train and task.data_split["seed"] == loaders.NQ_SPLIT_SEED == 42
    texts = sorted(f"Query: query number {i}" for i in range(10))  # EncodEval samples the prefixed texts
    random.seed(42)
    validation = {t.removeprefix("Query: ") for t in random.sample(texts, round(0.5 * len(texts)))}
    assert {f"query number {q[1:]}" for q in task.qrels["validation"]} == validation
    assert set(task.qrels["validation"]).isdisjoint(task.qrels["test"]) and len(task.qrels["test"]) == 5
    task.configure(corpus="judged", relevance="binary", loss="mnrl")
    assert task.searched_documents("validation") == 5  # its own queries' documents, of the 12


def test_mldr_dev_and_test_from_the_authors_mldr_en(hub):
    task = loaders.load_hub_retrieval("mldr")
    assert task.judged_splits == ["test", "validation"] and not task.has_train  # the authors train on MS MARCO only
    assert task.qrels["validation"] == {f"dev-{i}": {f"doc-dev-{i}": 1} for i in range(3)}
    assert task._query_source["test-1"] == "test question 1" and len(task.doc_ids) == 7
    task.configure(corpus="judged", relevance="binary", loss="mnrl")
    assert task.searched_documents("test") == 3 and task.searched_documents("validation") == 3


def test_mldr_still_reads_shitao_mldr_when_named(hub):
    task = loaders.load_hub_retrieval("mldr", "Shitao/MLDR")
    assert task.judged_splits == ["test", "train", "validation"] and len(task.doc_ids) == 10
    assert task.qrels["train"] == {f"train-{i}": {f"doc-train-{i}": 1} for i in range(3)}


@pytest.mark.parametrize("kind, hub_id, config, key", [("nq", "BeIR/nq", "corpus", "_id"),
                                                       ("nq", "BeIR/nq", "queries", "_id"),
                                                       ("mldr", "hgissbkh/mldr-en", "corpus", "docid")])
def test_a_hub_corpus_or_query_set_giving_an_id_twice_is_refused(hub, monkeypatch, kind, hub_id, config, key):
    """As for a local BEIR folder: a dict of the rows kept the last of two and dropped the other silently."""
    load = datasets.load_dataset

    def doubled(path, name=None, split=None, **kwargs):
        rows = load(path, name, split, **kwargs)
        if path == hub_id and name == config:
            return datasets.Dataset.from_list([*rows, rows[1]])
        return rows

    monkeypatch.setattr(datasets, "load_dataset", doubled)
    with pytest.raises(DataError, match=rf"{hub_id}: row \d+: the {key} '.+' occurs twice \(also row 1\)"):
        loaders.load_hub_retrieval(kind)
