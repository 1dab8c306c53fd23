"""Retrieval (IR): rank a corpus for each query, scored by NDCG@10 (the task: tasks/retrieval.py; its loaders:
tasks/retrieval_loaders.py)."""
from __future__ import annotations

from typing import Literal

from encoderlab.core.arguments import ConfigPath
from encoderlab.data.offline.taskfiles import SPLITS
from encoderlab.tasks.baselines import bm25_baselines
from encoderlab.tasks.retrieval_loaders import (
    HUB_IDS,
    HUB_TRAIN_PAIRS,
    load_beir,
    load_hub_retrieval,
    load_offline_retrieval,
)
from encoderlab.tasks.mteb_tasks import retrieval_task
from encoderlab.tasks.registry import SENTENCE_TRANSFORMERS, Body, Card, Export, Family, register
from encoderlab.tasks.taskfile import TaskFile, TaskFileSettings


class RetrievalFile(TaskFileSettings):
    family: Literal["retrieval"]
    folder: ConfigPath


def load_user(file: TaskFile, holdout: str, *, fingerprint: str):
    return load_beir(str(file.files["folder"]), file.name, fingerprint=fingerprint,
                     own_train_split=file.trains_on_own_qrels)


def load_paper(name: str, source: str | None, holdout: str, *, fingerprint: str):
    return load_hub_retrieval(name, source, fingerprint=fingerprint)  # type: ignore[arg-type]  # the sets' own splits


def export(protocol, body: Body) -> Export:
    """The body alone, mean-pooled by sentence-transformers (hub/sentence.py), with the retrieval prompts."""
    return Export(f"{body.prefix}Model", body.kind, {}, body.bidirectional, library=SENTENCE_TRANSFORMERS)


def usage(cls: str, name: str) -> list[str]:
    return ["```python", "from sentence_transformers import SentenceTransformer",
            f'model = SentenceTransformer("{name}")',
            'queries = model.encode_query(["what is the capital of France?"])  # prompt "Query: ", as trained',
            'documents = model.encode_document(["Paris is the capital of France."])  # prompt "Document: "',
            "print(model.similarity(queries, documents))", "```"]


RETRIEVAL = register(Family(
    name="retrieval", category="IR", settings=RetrievalFile, load_user=load_user, export=export,
    card=Card("sentence-similarity", ("retrieval",), "Embeddings are compared by cosine similarity.", usage),
    standard_metric="ndcg@10", baselines={"random": "random ranking", "bm25": "BM25"}, lexical_baselines=bm25_baselines,
    sequences=2,  # a query and its document
    load_offline=load_offline_retrieval,
    data_files=("corpus.jsonl", "queries.jsonl", *(f"qrels/{s}.tsv" for s in SPLITS)),
    paper=HUB_IDS, load_paper=load_paper, train_pairs=HUB_TRAIN_PAIRS, mteb=retrieval_task,
    # The authors' code: one corpus of every document judged in validation or test, binary relevance,
    # sentence-transformers' MNRL loss, scikit-learn's NDCG over the top 10. Where the one model is trained
    # (`retrieval.train_on`: MS MARCO for the paper) is the study's data, not the variant.
    variants={"authors": {"retrieval": {"corpus": "judged_any_split", "relevance": "binary", "loss": "mnrl",
                                        "ndcg": "top10_only"}}}))
