"""Retrieval's data plumbing: corpus/queries/qrels checks, and texts tokenised into flat id arrays (retrieval.py)."""
from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import TextTokenizer

Split = dict[str, dict[str, int]]  # query id -> document id -> relevance grade


class Tokens:
    """Token id sequences stored flat (int32 ids plus int64 offsets): compact, and loads with weights_only=True."""

    def __init__(self, flat: Tensor, offsets: Tensor) -> None:
        self.flat, self.offsets = flat, offsets
        self._flat, self._offsets = flat.numpy(), offsets.numpy()
        self.lengths = np.diff(self._offsets)  # (n,) int64

    def __getitem__(self, i: int) -> list[int]:
        return self._flat[self._offsets[i] : self._offsets[i + 1]].tolist()


def tokenise(texts: list[str], tokenizer: TextTokenizer, max_length: int, framed: Callable[[list[int]], list[int]],
             keep_eos: bool = True) -> list[Tensor]:
    """`framed(ids)` per text, at most max_length tokens: [flat int32 ids, int64 offsets, texts cut].

    keep_eos: the text is cut so that the framed sequence keeps its EOS (`<bos> ids <eos>`); otherwise the framed
    sequence is cut, EOS included, as a tokenizer given `text + eos_token` with `truncation=True` does (the paper
    authors' `inputs: eos`: a text longer than max_length ends without EOS).
    """
    room = max_length - (len(framed([])) if keep_eos else 0)
    flats, lengths, cut = [np.zeros(0, np.int32)], [np.zeros(1, np.int64)], 0
    for start in range(0, len(texts), 65_536):  # chunks bound the Python lists on corpora of millions
        encoded = tokenizer.encode_batch(texts[start : start + 65_536])
        seqs = [framed(ids[:room]) if keep_eos else framed(ids)[:max_length] for ids in encoded]
        cut += sum(len(ids) > max_length - len(framed([])) for ids in encoded)
        flats.append(np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32))
        lengths.append(np.array([len(x) for x in seqs], dtype=np.int64))
    return [torch.from_numpy(np.concatenate(flats)), torch.from_numpy(np.concatenate(lengths).cumsum()),
            torch.tensor(cut)]


def listed(ids: list) -> str:
    return ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def validate(corpus: dict[str, dict], queries: dict[str, str], qrels: dict[str, Split], where: dict[str, str],
              name: str) -> None:
    if not corpus:
        raise DataError(f"{where['corpus']}: the corpus is empty")
    empty = [d for d, doc in corpus.items() if not (f"{doc.get('title') or ''}{doc.get('text') or ''}").strip()]
    if empty:
        raise DataError(f"{where['corpus']}: {len(empty)} documents have no text: {listed(empty)}")
    if not qrels:
        raise DataError(f"{name}: no qrels for any split (train, validation or test)")
    for split, judged in qrels.items():
        if not any(g > 0 for rel in judged.values() for g in rel.values()):
            raise DataError(f"{where[split]}: split {split!r} has no relevant query-document pair")
        missing_docs = sorted({d for rel in judged.values() for d in rel if d not in corpus})
        if missing_docs:
            raise DataError(f"{where[split]}: {len(missing_docs)} document ids are not in the corpus "
                            f"({where['corpus']}): {listed(missing_docs)}")
        missing_queries = sorted(q for q in judged if q not in queries)
        if missing_queries:
            raise DataError(f"{where[split]}: {len(missing_queries)} query ids are not in the queries "
                            f"({where['queries']}): {listed(missing_queries)}")
        blank = sorted(q for q in judged if not str(queries[q] or "").strip())
        if blank:
            raise DataError(f"{where['queries']}: {len(blank)} queries of split {split!r} are empty: {listed(blank)}")
    refuse_leaks(qrels, where)


def refuse_leaks(qrels: dict[str, Split], where: dict[str, str]) -> None:
    """Refuse a relevant (query, document) pair of validation or test that train judges relevant too: the model
    would be trained on the answers it is scored on, and its score would say nothing of retrieval."""
    trained = {(q, d) for q, rel in qrels.get("train", {}).items() for d, g in rel.items() if g > 0}
    for split in ("validation", "test"):
        leaked = sorted((q, d) for q, rel in qrels.get(split, {}).items() for d, g in rel.items()
                        if g > 0 and (q, d) in trained)
        if leaked:
            raise DataError(f"{where[split]}: {len(leaked)} relevant (query, document) pairs of the {split} split "
                            f"are relevant in the train qrels too ({where['train']}): {listed(leaked)}; a model "
                            f"trained on them is scored on its own training answers: remove them from one file")
