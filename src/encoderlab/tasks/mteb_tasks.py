"""An encoderlab task as an MTEB custom task (the `mteb` library, an optional extra: `encoderlab mteb`,
hub/mteb_eval.py), its data given in memory, nothing downloaded. A family whose record has `mteb` set can be run
this way (retrieval and classification); the record's function makes the task.

- retrieval -> `AbsTaskRetrieval` on the test split: the queries and the whole searched corpus as encoderlab's own
  evaluation reads them (`baseline_texts`: stripped, a document's title and text joined by a space, without the
  "Query: " / "Document: " prompts, which the sentence-transformers model adds as its `query` / `document` prompts),
  the test judgements as they are. Its main score is `ndcg_at_10`, what encoderlab's frozen-embedding search
  scores as NDCG@10 (tests/integration/test_mteb.py).
- classification -> `AbsTaskClassification`: MTEB's own protocol, not encoderlab's fine-tuning: the embeddings are
  frozen, a logistic regression (scikit-learn, at most 100 iterations) is fitted on 8 train examples per label
  (`samples_per_label`) drawn 10 times (`n_experiments`, seed 42) and scored on test; main score `accuracy`, the
  mean of the 10. A pair task is one text per example, its fields named (`sentence_pairs: labelled`).

`mteb` is imported here only when a task is made, so that the rest of encoderlab never needs it.
"""
from __future__ import annotations

from typing import Any

from encoderlab.tasks.base import EvalTask

SPLIT = "test"
NAME_PREFIX = "encoderlab-"  # MTEB's name of an offline task: encoderlab-wiki-title


def metadata(task: EvalTask, kind: str, main_score: str) -> Any:
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(
        name=NAME_PREFIX + task.name, description=f"encoderlab's offline task {task.name!r} ({task.family})",
        type=kind, main_score=main_score, category="t2t", modalities=["text"], eval_splits=[SPLIT],
        eval_langs=["eng-Latn"], dataset={"path": f"encoderlab/{task.name}", "revision": task.fingerprint or "local"})


def retrieval_task(task: EvalTask) -> Any:
    """The MTEB retrieval task of an encoderlab retrieval task (the module docstring)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    documents, queries = task.baseline_texts(SPLIT)  # type: ignore[attr-defined]
    judged = {q: dict(rel) for q, rel in task.qrels[SPLIT].items()}  # type: ignore[attr-defined]

    class EncoderlabRetrieval(AbsTaskRetrieval):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = {"default": {SPLIT: {
                "corpus": Dataset.from_list([{"id": d, "title": "", "text": t} for d, t in documents.items()]),
                "queries": Dataset.from_list([{"id": q, "text": t} for q, t in queries.items()]),
                "relevant_docs": judged, "top_ranked": None}}}
            self.data_loaded = True

    EncoderlabRetrieval.metadata = metadata(task, "Retrieval", "ndcg_at_10")
    return EncoderlabRetrieval()


def classification_task(task: EvalTask) -> Any:
    """The MTEB classification task of an encoderlab classification task (the module docstring)."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.classification import AbsTaskClassification

    task.sentence_pairs = "labelled"  # type: ignore[attr-defined]  # one text per example, as MTEB embeds it
    splits = {s: Dataset.from_dict({"text": task._texts(s)[0], "label": list(task.gold[s])})  # type: ignore[attr-defined]
              for s in ("train", SPLIT)}

    class EncoderlabClassification(AbsTaskClassification):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = DatasetDict(splits)
            self.data_loaded = True

    EncoderlabClassification.metadata = metadata(task, "Classification", "accuracy")
    return EncoderlabClassification()
