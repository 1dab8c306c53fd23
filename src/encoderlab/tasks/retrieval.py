"""Retrieval: a bi-encoder fine-tuned with in-batch negatives, scored by exact NDCG@10 (docs/paper.md, IR).

The backbone encodes "Query: " + query and "Document: " + title + text as `<bos> ids <eos>` (or, with the protocol's
`inputs: eos`, `ids <eos>`) with bidirectional attention; an embedding is the mean of the final hidden states over
non-padding tokens. Training pairs a query with one of its relevant documents; the other documents of the batch are
its negatives (InfoNCE over the batch's cosine-similarity matrix, scaled by a learnable inverse temperature, the only
parameter of the head; or, with `retrieval.loss: mnrl`, the authors' fixed scale 20 and no false-negative masking).
Evaluation encodes the searched corpus (every document; with `retrieval.corpus: judged` the documents judged in the
split; with `judged_any_split` those judged in validation or test, one corpus for both), scores every
query-document pair and keeps the exact top 100 per query. "score" is standard NDCG@10 or, with `retrieval.ndcg:
top10_only`, the authors' NDCG over the top 10 alone (metrics.ndcg_top_k_only); "standard" is NDCG@10 either way.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.tasks.base import EvalTask, constant, pad
from encoderlab.tasks.bi_encoder import (
    DOCUMENT_PREFIX,
    QUERY_PREFIX,
    FixedScaleHead,
    RetrievalHead,
    document_text,
    encode,
    info_nce,
    query_text,
)
from encoderlab.tasks.common import cached
from encoderlab.tasks.metrics import ndcg_at_k, ndcg_top_k_only, recall_at_k
from encoderlab.tasks.random_ranking import expected_ndcg_at_k, expected_ndcg_top_k_only, expected_recall_at_k
from encoderlab.tasks.retrieval_data import Split, Tokens, tokenise, validate

TOP_K = 100  # the run kept per query: enough for NDCG@10 and recall@100
SCORE_CHUNK = 8192  # documents scored against all queries at once (bounds the score matrix)
EMBEDDING_CACHE_BYTES = 2**30  # corpus embeddings up to this size are reused while the weights stay the same
CACHE_VERSION = 2  # 2: texts cut to max_length are counted
# The protocol's `retrieval.ndcg` -> the metric reported as "score"; "standard" is always NDCG@10
METRICS = {"standard": "ndcg@10", "top10_only": "ndcg@10_top10_only"}


class RetrievalTask(EvalTask):
    family = "retrieval"
    metric = METRICS["standard"]  # the protocol's `retrieval.ndcg` (configure)
    standard_metric = METRICS["standard"]
    truncation_unit = "texts"  # documents of the whole corpus, and queries

    def __init__(self, name: str, corpus: dict[str, dict], queries: dict[str, str], qrels: dict[str, Split],
                 *, files: dict[str, str] | None = None, pairs_only: set[str] = frozenset(),
                 data_split: dict | None = None, fingerprint: str = "", own_train_split: bool = False) -> None:
        """corpus: id -> {"title", "text"}; queries: id -> text; qrels: split -> query -> document -> grade.

        `files` names where corpus, queries and each split's qrels came from, for error messages. `pairs_only`:
        documents that are training positives only (given with their pairs, not part of the corpus): never searched.
        `data_split`: how validation and test were drawn where the source has one evaluation split.
        """
        self.name, self.fingerprint, self.own_train_split = name, fingerprint, own_train_split
        self.data_split = data_split
        where = {"corpus": f"{name}: corpus", "queries": f"{name}: queries"}
        where.update({s: f"{name}: qrels[{s}]" for s in qrels}, **(files or {}))
        validate(corpus, queries, qrels, where, name)
        self.doc_ids = list(corpus)
        self._doc_index = {d: i for i, d in enumerate(self.doc_ids)}
        self._doc_texts = [document_text((corpus[d].get("title") or "").strip(), (corpus[d].get("text") or "").strip())
                           for d in self.doc_ids]
        # "Judged": every document of a split's judgements, whatever its grade (the authors' searched corpus)
        self._judged = {s: sorted({d for rel in judged.values() for d in rel}) for s, judged in qrels.items()}
        # `retrieval.corpus: judged_any_split`: one corpus for every evaluated split, the documents judged (any grade)
        # for any validation or test query, as the authors' loaders build MS MARCO's and NQ's. For MLDR they take the
        # positive passages of the dev and test queries instead: the same rule here, since our MLDR loader
        # (retrieval_loaders._hub_mldr) judges exactly those passages, each with grade 1, and no other document.
        self._judged_any = sorted({d for s in qrels if s != "train" for d in self._judged[s]})
        self.qrels = {s: {q: {d: int(g) for d, g in rel.items()} for q, rel in judged.items()
                          if any(g > 0 for g in rel.values())} for s, judged in qrels.items()}
        self._query_source = {q: queries[q].strip() for judged in self.qrels.values() for q in judged}
        self._index_queries()
        self._docs: Tokens | None = None
        self._queries: Tokens | None = None
        self._pad_id = 0
        self._embedding_cache: tuple[tuple, list[tuple[Tensor, Tensor]]] | None = None
        self._pairs_only = set(pairs_only)
        self._searched = self._searchable()  # corpus indices that are ranked (None: all); see limit_corpus
        self._corpus, self._binary, self._loss, self._ndcg = "all", False, "infonce", "standard"  # see configure

    def _index_queries(self) -> None:
        self.query_ids = sorted({q for judged in self.qrels.values() for q in judged})
        self._query_index = {q: i for i, q in enumerate(self.query_ids)}
        self._query_texts = [query_text(self._query_source[q]) for q in self.query_ids]

    def scored_examples(self, split: str) -> int:
        return len(self.qrels.get(split, {}))

    def truncation_totals(self) -> dict[str, int]:
        return {"corpus": len(self.doc_ids), "queries": len(self.query_ids)}  # the texts `prepare` tokenised

    def subsample(self, split: str, n: int, seed: int) -> None:
        """Keep a seeded random `n` queries of a split (CPU protocols); the corpus stays whole. Before `prepare`."""
        self._refuse_once_built("subsample")
        judged = self.qrels.get(split, {})
        if len(judged) > n:
            qids = sorted(judged)
            keep = sorted(torch.randperm(len(qids), generator=torch.Generator().manual_seed(seed))[:n].tolist())
            self.qrels[split] = {qids[i]: judged[qids[i]] for i in keep}
            self._index_queries()
            self._docs = self._queries = None

    def limit_corpus(self, n: int, seed: int) -> None:
        """Search only `n` documents: every document judged for a validation/test query plus seeded random others.
        Training positives stay available whatever the cap (they are encoded as pairs, never searched). Scores on a
        reduced corpus are higher than on the whole one; the protocol records the cap. Before `prepare`."""
        judged = {d for split, rel in self.qrels.items() if split != "train" for r in rel.values() for d in r}
        if len(self.doc_ids) - len(self._pairs_only) <= max(n, len(judged)):
            self._searched = self._searchable()
            return
        others = sorted(set(self.doc_ids) - judged - self._pairs_only)
        order = torch.randperm(len(others), generator=torch.Generator().manual_seed(seed)).tolist()
        keep = judged | {others[i] for i in order[: max(0, n - len(judged))]}
        self._searched = np.array(sorted(self._doc_index[d] for d in keep), dtype=np.int64)
        self._embedding_cache = None

    def _searchable(self) -> np.ndarray | None:
        if not self._pairs_only:
            return None
        return np.array([i for i, d in enumerate(self.doc_ids) if d not in self._pairs_only], dtype=np.int64)

    def apply_protocol(self, protocol) -> None:
        super().apply_protocol(protocol)
        self.configure(**protocol.retrieval.scoring())

    def limit(self, protocol, seed: int) -> None:
        super().limit(protocol, seed)
        if protocol.max_corpus_documents:
            self.limit_corpus(protocol.max_corpus_documents, seed=seed)

    def configure(self, corpus: str, relevance: str, loss: str, ndcg: str = "standard") -> None:
        """The protocol's `retrieval` settings (finetuning/protocol.py RetrievalSection). Before `prepare`."""
        self._corpus, self._binary, self._loss, self._ndcg = corpus, relevance == "binary", loss, ndcg
        self.metric = METRICS[ndcg]
        self._embedding_cache = None
        for split in ("validation", "test"):
            if split in self.qrels and (n := self.searched_documents(split)) < 2:  # any ranking of one is perfect
                raise DataError(f"retrieval task {self.name!r}: its {split} queries are ranked among {n} document "
                                f"(retrieval.corpus: {corpus}); a ranking needs at least two documents")

    def _searched_in(self, split: str) -> np.ndarray | None:
        """Corpus indices ranked for the queries of `split` (None: every document)."""
        if self._corpus != "all":
            judged = self._judged[split] if self._corpus == "judged" else self._judged_any
            return np.array(sorted(self._doc_index[d] for d in judged), dtype=np.int64)
        return self._searched

    def searched_documents(self, split: str = "test") -> int:
        """How many documents a query of `split` is ranked against."""
        searched = self._searched_in(split)
        return len(self.doc_ids) if searched is None else len(searched)

    @property
    def judged_splits(self) -> list[str]:
        return sorted(self.qrels)

    @property
    def has_train(self) -> bool:
        """False for a zero-shot set (no train qrels): fine-tune on another retrieval task and evaluate this one."""
        return bool(self.qrels.get("train"))

    # ------------------------------------------------------------------------------------------- preparation

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        self._refuse_once_built("prepare")

        def framed(ids: list[int]) -> list[int]:
            return self.framed(ids, tokenizer.bos_id, tokenizer.eos_id)

        prompt = max(map(len, tokenizer.encode_batch([QUERY_PREFIX.rstrip(), DOCUMENT_PREFIX.rstrip()])))
        if max_length < (need := len(framed([])) + prompt + 1):  # else no text, or nothing but its prompt, is read
            raise DataError(f"max_length={max_length} is too small for task {self.name!r}: at least {need} (its "
                            "special tokens, the 'Query: ' or 'Document: ' prompt and a token of text)")
        # `inputs: eos` is the authors' tokenisation of `text + eos_token`: a cut text loses its EOS (tokenise)
        keep_eos = self.inputs == "bos_eos"
        inputs = [] if keep_eos else [f"inputs={self.inputs}"]  # the default's cache key is the one it always had
        data = "\x00".join([str(CACHE_VERSION), *inputs, *self._doc_texts, "\x00queries", *self._query_texts])
        state = cached(cache_dir, "retrieval", self.name, tokenizer, max_length, data,
                       lambda: {kind: self._tokenise(texts, tokenizer, max_length, framed, keep_eos)
                                for kind, texts in (("docs", self._doc_texts), ("queries", self._query_texts))})
        self._pad_id, self._embedding_cache = tokenizer.pad_id, None
        self._docs = Tokens(*state["docs"][:2])
        self._queries = Tokens(*state["queries"][:2])
        self.truncated = {"corpus": int(state["docs"][2]), "queries": int(state["queries"][2])}

    _tokenise = staticmethod(tokenise)  # reached through the class, so that a test can see whether it ran

    def _prepared(self) -> tuple[Tokens, Tokens]:
        if self._docs is None or self._queries is None:
            raise RuntimeError(f"{self.name}: call prepare(tokenizer, max_length) first")
        return self._docs, self._queries

    # ------------------------------------------------------------------------------------------- training

    def num_train_examples(self) -> int:
        return len(self.qrels.get("train", {}))

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        return FixedScaleHead() if self._loss == "mnrl" else RetrievalHead()  # nothing random to initialise

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        """One pair per train query; a query with several relevant documents gets one drawn per epoch (seeded)."""
        if not self.has_train:
            raise DataError(f"{self.name} has no train qrels: it can only be evaluated zero-shot "
                            "(fine-tune on another retrieval task, then evaluate this one)")
        docs, queries = self._prepared()
        judged = self.qrels["train"]
        qids = sorted(judged)
        rng = np.random.default_rng(seed)
        relevant = [sorted(self._doc_index[d] for d, g in judged[q].items() if g > 0) for q in qids]
        positive = [r[int(rng.integers(len(r)))] for r in relevant]
        qidx = [self._query_index[q] for q in qids]
        lengths = (queries.lengths[qidx] + docs.lengths[positive]).tolist()
        for batch in self.batch_indices(lengths, batch_size, seed):
            q_ids, q_mask = pad([queries[qidx[i]] for i in batch], self._pad_id)
            d_ids, d_mask = pad([docs[positive[i]] for i in batch], self._pad_id)
            out = {"query_ids": q_ids, "query_mask": q_mask, "doc_ids": d_ids, "doc_mask": d_mask}
            if self._loss == "infonce":  # mnrl, as the authors' loss, treats every other document as a negative
                sets = [set(relevant[i]) for i in batch]
                out["false_negatives"] = torch.tensor([[j != i and positive[b] in sets[i] for j, b in enumerate(batch)]
                                                       for i in range(len(batch))], dtype=torch.bool)
            yield out

    def loss(self, backbone: nn.Module, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        q = encode(backbone, batch["query_ids"], batch["query_mask"])
        d = encode(backbone, batch["doc_ids"], batch["doc_mask"])
        return info_nce(head(q, d), batch.get("false_negatives"))

    # ------------------------------------------------------------------------------------------- evaluation

    def _check_split(self, split: str) -> Split:
        if split not in self.qrels:
            raise DataError(f"{self.name} has no {split!r} qrels; it has: {', '.join(self.judged_splits)}")
        return self.qrels[split]

    def _embed(self, backbone: nn.Module, tokens: Tokens, indices: Sequence[int], batch_size: int
               ) -> Iterator[tuple[list[int], Tensor]]:
        """(positions in `indices`, unit-norm embeddings (b, C)), in batches of similar lengths (little padding)."""
        device = next(backbone.parameters()).device
        order = np.argsort(tokens.lengths[np.asarray(indices, dtype=np.int64)], kind="stable").tolist()
        for start in range(0, len(order), batch_size):
            part = order[start : start + batch_size]
            ids, mask = pad([tokens[indices[p]] for p in part], self._pad_id)
            yield part, F.normalize(encode(backbone, ids.to(device), mask.to(device)), dim=-1)

    def _doc_chunks(self, backbone: nn.Module, batch_size: int, split: str) -> Iterator[tuple[Tensor, Tensor]]:
        """(corpus indices (n,), unit-norm embeddings (n, C)), about SCORE_CHUNK documents at a time.

        Embeddings of a corpus that fits in EMBEDDING_CACHE_BYTES are kept until the weights change, so scoring
        validation then test encodes the corpus once. "Change" is read from the parameters' identity, in-place
        version counters and sums, and the autocast state: any optimizer step or load alters one of them.
        """
        params = list(backbone.parameters())
        device = params[0].device
        searched = self._searched_in(split)
        key = (id(backbone), None if searched is None else searched.tobytes(), torch.is_autocast_enabled(device.type),
               tuple(p._version for p in params),
               tuple(torch.stack([p.detach().float().sum() for p in params]).tolist()))
        if self._embedding_cache is not None and self._embedding_cache[0] == key:
            yield from self._embedding_cache[1]
            return
        self._embedding_cache = None
        chunks: list[tuple[Tensor, Tensor]] | None = None  # a list once the size is known to fit the budget
        pending: list[tuple[list[int], Tensor]] = []

        def chunk() -> tuple[Tensor, Tensor]:
            out = (torch.tensor([i for p, _ in pending for i in p], device=device), torch.cat([e for _, e in pending]))
            pending.clear()
            if chunks is not None:
                chunks.append(out)
            return out

        searched = range(len(self.doc_ids)) if searched is None else searched.tolist()
        for part, emb in self._embed(backbone, self._prepared()[0], searched, batch_size):
            if not pending and chunks is None and len(searched) * emb.shape[1] * 4 <= EMBEDDING_CACHE_BYTES:
                chunks = []
            pending.append(([searched[i] for i in part], emb))  # positions in `searched` -> corpus indices
            if sum(len(p) for p, _ in pending) >= SCORE_CHUNK:
                yield chunk()
        if pending:
            yield chunk()
        if chunks is not None:
            self._embedding_cache = (key, chunks)

    @torch.no_grad()
    def search(self, backbone: nn.Module, split: str, batch_size: int, k: int = TOP_K) -> dict[str, dict[str, float]]:
        """Exact top-k documents by cosine similarity for every query of `split`: {query: {document: score}}."""
        _, queries = self._prepared()
        qids = sorted(self._check_split(split))
        positions, parts = [], []
        for part, emb in self._embed(backbone, queries, [self._query_index[q] for q in qids], batch_size):
            positions += part
            parts.append(emb)
        q_emb = torch.cat(parts)[torch.argsort(torch.tensor(positions, device=parts[0].device))]  # (Q, C), qids order
        best = torch.empty(len(qids), 0, device=q_emb.device)
        best_idx = torch.empty(len(qids), 0, dtype=torch.long, device=q_emb.device)
        for idx, d_emb in self._doc_chunks(backbone, batch_size, split):  # a running exact top-k: memory (Q, k + chunk)
            scores = torch.cat([best, q_emb @ d_emb.T], dim=1)
            candidates = torch.cat([best_idx, idx.expand(len(qids), -1)], dim=1)
            best, top = scores.topk(min(k, scores.shape[1]), dim=1)
            best_idx = candidates.gather(1, top)
        best, best_idx = best.cpu().tolist(), best_idx.cpu().tolist()
        return {q: {self.doc_ids[d]: s for d, s in zip(best_idx[r], best[r])} for r, q in enumerate(qids)}

    def evaluate(self, backbone: nn.Module, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        """The protocol's NDCG ("score"), standard NDCG@10 ("standard"), both by name, and recall@100; the head's
        temperature does not change a ranking, so it is unused."""
        run = self.search(backbone, split, batch_size)
        rankings = [tuple(sorted(found, key=found.get, reverse=True)[:10]) for found in run.values()]
        return {**_scores(run, self.qrels[split], self._binary, self._ndcg),
                **constant(rankings, lambda top: f"the same top 10 for every query, {top[0]!r} first")}

    def trivial_baseline(self, split: str) -> dict[str, float]:
        """A random ranking: each metric's exact expectation over uniformly random rankings of the documents searched
        for `split` (tasks/random_ranking.py), not one draw of them."""
        self._check_split(split)
        indices = self._searched_in(split)
        searched = self._doc_index if indices is None else {self.doc_ids[i] for i in indices.tolist()}
        qrels = _gains(self.qrels[split], self._binary)
        n = len(searched)
        return _named(self._ndcg, expected_ndcg_at_k(qrels, searched, n, k=10), expected_ndcg_top_k_only(
            qrels, searched, n, k=10), expected_recall_at_k(qrels, searched, n, k=100))

    def score_run(self, run: dict[str, dict[str, float]], split: str) -> dict[str, float]:
        """A ranking of `split`'s queries ({query: {document: score}}) scored as `evaluate` scores the model's."""
        return _scores(run, self.qrels[split], self._binary, self._ndcg)

    def baseline_texts(self, split: str) -> tuple[dict[str, str], dict[str, str]]:
        """({document id: text} of the corpus searched for `split`, {query id: text} of its queries), without the
        model's "Query: " / "Document: " prefixes: what a lexical ranker ranks (tasks/baselines.py)."""
        searched = self._searched_in(split)
        searched = range(len(self.doc_ids)) if searched is None else searched.tolist()
        cut = len(DOCUMENT_PREFIX)
        return ({self.doc_ids[i]: self._doc_texts[i][cut:] for i in searched},
                {q: self._query_source[q] for q in sorted(self._check_split(split))})

    def baseline_data(self) -> list:
        """The settings that decide what is searched and scored; the texts and judgements baselines score."""
        scored = ("validation", "test")
        return [{"corpus": self._corpus, "binary": self._binary, "ndcg": self._ndcg},
                [self.baseline_texts(s) for s in scored], {s: self.qrels[s] for s in scored}]


def _scores(run: dict[str, dict[str, float]], qrels: Split, binary: bool = False, ndcg: str = "standard"
            ) -> dict[str, float]:
    """Standard NDCG@10, the authors' top-10-only NDCG and recall@100, "score" the one `ndcg` names and "standard"
    the standard NDCG@10; `binary`: every grade >= 1 is a gain of 1 (the authors' relevance)."""
    qrels = _gains(qrels, binary)
    return _named(ndcg, ndcg_at_k(run, qrels, k=10), ndcg_top_k_only(run, qrels, k=10), recall_at_k(run, qrels, k=100))


def _gains(qrels: Split, binary: bool) -> Split:
    """The judgements as the metrics' gains; `binary`: every grade >= 1 is a gain of 1 (the authors' relevance)."""
    return {q: {d: int(g >= 1) for d, g in rel.items()} for q, rel in qrels.items()} if binary else qrels


def _named(ndcg: str, standard: float, top10_only: float, recall: float) -> dict[str, float]:
    """The scores by name, "score" the NDCG the protocol's `retrieval.ndcg` names."""
    named = {METRICS["standard"]: standard, METRICS["top10_only"]: top10_only}
    return {"score": named[METRICS[ndcg]], "standard": standard, **named, "recall@100": recall}
