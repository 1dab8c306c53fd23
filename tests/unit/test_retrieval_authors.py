"""The authors' retrieval choices as protocol settings: NDCG over the top 10 alone (scikit-learn's `ndcg_score` on the
10 top-ranked documents), one corpus of every document judged in validation or test, `inputs: eos` and
`batch_order: random`; the defaults stay encoderlab's."""
from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import ndcg_score
from test_task_retrieval import backbone, make_data, tok  # noqa: F401 - tok is a fixture

from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.shared_training import TrainedOnce
from encoderlab.tasks import bi_encoder as B
from encoderlab.tasks import retrieval as R
from encoderlab.tasks.base import random_order
from encoderlab.tasks.metrics import ndcg_at_k, ndcg_top_k_only

pytestmark = pytest.mark.usefixtures("one_thread")


def authors(protocol: dict | None = None) -> Protocol:
    """The authors' retrieval settings (plus any others given)."""
    retrieval = {"corpus": "judged_any_split", "relevance": "binary", "loss": "mnrl", "ndcg": "top10_only"}
    return Protocol.model_validate({"retrieval": retrieval, **(protocol or {})})


# ------------------------------------------------------------------------- the metric, by hand and against sklearn


def three_queries() -> tuple[dict, dict]:
    """Ranks by hand (scores descending): q1's one relevant document 3rd; q2's three relevant ones 1st, 4th and 17th
    (outside the top 10); q3's only relevant one 11th."""
    fill = {f"x{i:02d}": 0.5 - i / 100 for i in range(12)}  # non-relevant, below the ranked ones
    run = {"q1": {"x90": 0.99, "x91": 0.98, "a": 0.97, **fill},
           "q2": {"b": 0.99, "x91": 0.98, "x92": 0.97, "c": 0.96, **fill, "e": 0.0},
           "q3": {**fill, "f": 0.405}}  # f is after x00..x09 (0.50 .. 0.41), before x10 (0.40): 11th
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1, "e": 1, "x00": 0}, "q3": {"f": 1}}
    return run, qrels


def test_top10_only_and_standard_ndcg_by_hand():
    run, qrels = three_queries()
    assert [d for d, _ in sorted(run["q2"].items(), key=lambda x: -x[1])].index("e") == 16
    assert [d for d, _ in sorted(run["q3"].items(), key=lambda x: -x[1])].index("f") == 10
    # q1: 1 / log2(4) = 0.5 both ways (one relevant document: the two metrics agree)
    # q2: DCG = 1 + 1 / log2(5) = 1.430677; standard ideal over b, c, e = 1 + 1 / log2(3) + 1 / log2(4) = 2.130930
    #     -> 0.671386; top-10-only ideal over the retrieved b, c = 1 + 1 / log2(3) = 1.630930 -> 0.877215
    # q3: nothing relevant in the top 10: 0 both ways
    assert ndcg_at_k(run, qrels) == pytest.approx(100 * (0.5 + 0.671386 + 0) / 3, abs=1e-4)  # 39.0462
    assert ndcg_top_k_only(run, qrels) == pytest.approx(100 * (0.5 + 0.877215 + 0) / 3, abs=1e-4)  # 45.9072
    scores = R._scores(run, qrels, binary=True, ndcg="top10_only")
    assert scores["score"] == scores["ndcg@10_top10_only"] == pytest.approx(45.9072, abs=1e-4)
    assert scores["standard"] == scores["ndcg@10"] == pytest.approx(39.0462, abs=1e-4)
    default = R._scores(run, qrels, binary=True)
    assert default["score"] == default["standard"] == pytest.approx(39.0462, abs=1e-4)


def test_tied_scores_share_their_gains_as_sklearn_does():
    run = {"q": {"n": 0.7, "r": 0.7, "m": 0.1}}  # r (relevant) and n tie at ranks 1-2
    qrels = {"q": {"r": 1}}
    # each of ranks 1 and 2 gets half a gain: 0.5 x (1 + 1 / log2(3)) = 0.815465; the ideal (r first) is 1
    assert ndcg_top_k_only(run, qrels) == pytest.approx(81.5465, abs=1e-4)
    assert ndcg_top_k_only(run, qrels) == pytest.approx(100 * ndcg_score([[0, 1, 0]], [[0.7, 0.7, 0.1]]))
    assert ndcg_at_k(run, qrels) == pytest.approx(100 / math.log2(3))  # standard: ties by document id, n first


def random_query(rng: np.random.Generator, tied: bool) -> tuple[dict[str, float], dict[str, int]]:
    n = int(rng.integers(2, 25))  # fewer and more than 10 retrieved
    scores = rng.integers(0, 4, n) / 4 if tied else rng.random(n)
    grades = rng.choice([0, 0, 0, 1, 2, 3], n)
    qrels = {f"d{i}": int(g) for i, g in enumerate(grades) if g or rng.random() < 0.3}  # some judged 0
    if not any(qrels.values()):
        qrels["unretrieved"] = 1  # a relevant document the run never found
    return {f"d{i}": float(s) for i, s in enumerate(scores)}, qrels


@pytest.mark.parametrize("tied", [False, True])
def test_top10_only_equals_sklearn_ndcg_score_on_random_runs(tied):
    """Graded and binary gains, several relevant documents, none retrieved, ties: on the same 10 documents the metric
    is the mean of sklearn's ndcg_score([gains], [scores]) x 100."""
    rng = np.random.default_rng(int(tied))
    for _ in range(60):
        pairs = {f"q{i}": random_query(rng, tied) for i in range(int(rng.integers(1, 8)))}
        run, qrels = {q: p[0] for q, p in pairs.items()}, {q: p[1] for q, p in pairs.items()}
        for binary in (False, True):
            gain = (lambda g: int(g >= 1)) if binary else (lambda g: g)
            expected = []
            for q in run:
                top = sorted(run[q], key=lambda d: (-run[q][d], d))[:10]  # the ten the metric scores
                expected.append(ndcg_score([[gain(qrels[q].get(d, 0)) for d in top]], [[run[q][d] for d in top]]))
            got = R._scores(run, qrels, binary=binary, ndcg="top10_only")["score"]
            assert got == pytest.approx(100 * np.mean(expected), rel=1e-12, abs=1e-12)


def test_top10_only_equals_the_authors_evaluation_code():
    """Without ties, what the authors' code does, step by step: the top 10 by `np.argsort(scores)[-10:]`, labels 1
    for the documents of the query's relevant list (grade >= 1), `ndcg_score([labels], [scores])`, the mean."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        pairs = {f"q{i}": random_query(rng, tied=False) for i in range(5)}
        run, qrels = {q: p[0] for q, p in pairs.items()}, {q: p[1] for q, p in pairs.items()}
        relevant = {q: [d for d, g in rel.items() if g >= 1] for q, rel in qrels.items()}
        values = []
        for q, scores in run.items():
            top = np.array(list(scores))[np.argsort(list(scores.values()))[-10:]]
            values.append(ndcg_score([[int(d in relevant[q]) for d in top]], [[scores[d] for d in top]]))
        assert R._scores(run, qrels, binary=True, ndcg="top10_only")["score"] == pytest.approx(100 * np.mean(values))


# ------------------------------------------------------------------------- the corpus of every judged document


def test_one_corpus_of_the_validation_and_test_judgements(tok):  # noqa: F811
    corpus, queries, qrels = make_data(n_docs=30)
    qrels["validation"]["q8"]["d20"] = 0  # judged (not relevant) in validation only
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.apply_protocol(authors())
    task.prepare(tok, max_length=64)
    # validation judges d8, d9, d10, d20; test d10, d11: 5 documents, the train ones (d0-d7) never
    assert task.searched_documents("validation") == task.searched_documents("test") == 5
    run = task.search(backbone(tok), "test", batch_size=4)
    assert {d for r in run.values() for d in r} == {"d8", "d9", "d10", "d11", "d20"}  # d8, d9, d20: validation's
    task.configure(corpus="judged", relevance="binary", loss="mnrl")
    assert task.searched_documents("validation") == 4 and task.searched_documents("test") == 2


def test_the_protocol_reaches_the_task_and_its_scores(tok):  # noqa: F811
    corpus, queries, qrels = make_data(n_docs=30)
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.apply_protocol(authors())
    assert (task.metric, task.standard_metric) == ("ndcg@10_top10_only", "ndcg@10")
    assert TrainedOnce(task, [task]).metric == "ndcg@10_top10_only"
    task.prepare(tok, max_length=64)
    model = backbone(tok)
    for scores in (task.evaluate(model, task.make_head(32, None), "validation", 4), task.trivial_baseline("test")):
        assert scores["score"] == scores["ndcg@10_top10_only"] and scores["standard"] == scores["ndcg@10"]
        assert scores["score"] >= scores["standard"]  # the ideal over fewer documents can only be smaller
    task.apply_protocol(Protocol())
    assert task.metric == "ndcg@10" and task.searched_documents("test") == 30
    with pytest.raises(ValueError, match="judged_any_split searches only"):
        authors({"max_corpus_documents": 100})


# ------------------------------------------------------------------------- inputs: eos, batch_order: random


def test_inputs_eos_no_bos_and_a_cut_text_loses_its_eos(tok, tmp_path):  # noqa: F811
    corpus, queries, qrels = make_data()
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.prepare(tok, max_length=256, cache_dir=tmp_path)
    task.apply_protocol(authors({"inputs": "eos"}))
    task.prepare(tok, max_length=256, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("retrieval-*.pt"))) == 2  # the inputs are part of the cache key
    docs, query_tokens = task._prepared()
    q = query_tokens[task.query_ids.index("q3")]
    assert q[0] != tok.bos_id and q[-1] == tok.eos_id and tok.decode(q[:-1]) == "Query: " + queries["q3"]
    ids = tok.encode_batch([B.document_text(corpus["d5"]["title"], corpus["d5"]["text"])])[0]
    assert docs[task.doc_ids.index("d5")] == [*ids, tok.eos_id]
    task.prepare(tok, max_length=12)  # at least the "Document:" prompt (9 tokens here), a token of text and EOS
    assert docs_cut(task, "d5") == ids[:12]  # `text + EOS` cut at 12 tokens: no EOS left, as the authors' tokenizer
    cut = sum(len(x) + 1 > 12 for x in tok.encode_batch(task._doc_texts))
    assert task.truncated["corpus"] == cut > 0


def docs_cut(task: R.RetrievalTask, doc: str) -> list[int]:
    return task._prepared()[0][task.doc_ids.index(doc)]


def test_batch_order_random_draws_the_trainers_permutation(tok):  # noqa: F811
    corpus, queries, qrels = make_data()
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.apply_protocol(authors({"batch_order": "random"}))
    task.prepare(tok, max_length=64)
    _, query_tokens = task._prepared()
    qids = sorted(task.qrels["train"])  # q0 .. q7
    for batch, expected in zip(task.train_batches(3, seed=5), random_order(8, 3, seed=5), strict=True):
        rows = [row[m.bool()].tolist() for row, m in zip(batch["query_ids"], batch["query_mask"])]
        assert rows == [query_tokens[task.query_ids.index(qids[i])] for i in expected]
