"""Tasks built whole: the one way a sweep or a study makes the tasks it fine-tunes on.

A task under a protocol is made in one order, here and nowhere else: loaded with its identity (name and
fingerprint, given to its constructor), the protocol's seeded subsamples (before anything is derived from the
examples), the protocol's choices that shape inputs, heads and metrics (`apply_protocol`), the task's own limits
(`limit`: retrieval's searched corpus), its splits tokenised at the protocol's length for its family, and its
baselines; then sealed (`EvalTask.seal`), so that no step is taken again out of that order. The protocol is read,
never imported: finetuning/protocol.py is a layer above.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.tasks import baselines, load_task
from encoderlab.tasks.base import EvalTask

SUBSAMPLE_SEED = 0  # the protocol's subsamples (max_train_examples, max_eval_examples, max_corpus_documents)


def build_tasks(specs: list[str], protocol, tokenizer: TextTokenizer, *, cache_dir: Path | None = None,
                each: Callable[[EvalTask, float], None] = lambda task, seconds: None) -> list[EvalTask]:
    """The tasks `specs` name, built whole: every one loaded first, so that a bad one fails before any is prepared,
    then each prepared under `protocol`; `each(task, seconds it took)` is called as each is ready."""
    tasks = [load_task(spec, holdout=protocol.holdout) for spec in specs]
    names = [t.name for t in tasks]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise EncoderlabError(f"two tasks are named {twice[0]!r} in {' '.join(specs)}; give a task file a name of "
                              "its own (`name:`)")
    for task in tasks:
        t0 = time.perf_counter()
        _prepare(task, protocol, tokenizer, cache_dir)
        each(task, time.perf_counter() - t0)
    return tasks


def build_task(spec: str, protocol, tokenizer: TextTokenizer, *, cache_dir: Path | None = None) -> EvalTask:
    """The task `spec` names, prepared under `protocol` for `tokenizer`, its baselines computed."""
    return build_tasks([spec], protocol, tokenizer, cache_dir=cache_dir)[0]


def _prepare(task: EvalTask, protocol, tokenizer: TextTokenizer, cache_dir: Path | None) -> None:
    """A task just loaded made what `protocol` asks, in the one order that gives the same examples, ids and
    baselines every time."""
    if protocol.max_train_examples:
        task.subsample("train", protocol.max_train_examples, seed=SUBSAMPLE_SEED)
    if protocol.max_eval_examples:
        for split in ("validation", "test"):
            task.subsample(split, protocol.max_eval_examples, seed=SUBSAMPLE_SEED)
    task.apply_protocol(protocol)
    task.limit(protocol, seed=SUBSAMPLE_SEED)
    length = protocol.for_task(task.name).length_for(task.family)
    task.prepare(tokenizer, length, cache_dir)
    task.baseline_scores = baselines.compute(task, tokenizer, length, cache_dir)
    task.seal()
