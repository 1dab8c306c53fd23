"""Tasks built whole: the one way a sweep or a study makes the tasks it fine-tunes on.

A task under a protocol is made in one order, here and nowhere else: loaded with its identity (name and
fingerprint), the protocol's seeded subsamples (before anything is derived from the examples), the protocol's choices
that shape inputs, heads and metrics (`adopt`), the task's own limits (`limit`: retrieval's searched corpus), its
splits tokenised at the protocol's length for its family, and its baselines. The protocol is read, never imported:
finetuning/protocol.py is a layer above.
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.tasks import baselines, load_task
from encoderlab.tasks.base import EvalTask

SUBSAMPLE_SEED = 0  # the protocol's subsamples (max_train_examples, max_eval_examples, max_corpus_documents)


def build_task(spec: str, protocol, tokenizer: TextTokenizer, *, cache_dir: Path | None = None) -> EvalTask:
    """The task `spec` names, prepared under `protocol` for `tokenizer`, its baselines computed."""
    return prepared(load_task(spec, holdout=protocol.holdout), protocol, tokenizer, cache_dir=cache_dir)


def prepared(task: EvalTask, protocol, tokenizer: TextTokenizer, *, cache_dir: Path | None = None) -> EvalTask:
    """A task just loaded (`load_task`: a sweep loads every task before preparing any, so that a bad one fails
    first) made what `protocol` asks, in the one order that gives the same examples, ids and baselines every time."""
    if protocol.max_train_examples:
        task.subsample("train", protocol.max_train_examples, seed=SUBSAMPLE_SEED)
    if protocol.max_eval_examples:
        for split in ("validation", "test"):
            task.subsample(split, protocol.max_eval_examples, seed=SUBSAMPLE_SEED)
    task.adopt(protocol)
    task.limit(protocol, seed=SUBSAMPLE_SEED)
    length = protocol.for_task(task.name).length_for(task.family)
    task.prepare(tokenizer, length, cache_dir)
    task.baseline_scores = baselines.compute(task, tokenizer, length, cache_dir)
    return task
