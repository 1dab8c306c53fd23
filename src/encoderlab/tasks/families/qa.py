"""Extractive question answering (QA): an answer span in a context, or none (tasks/qa.py, tasks/qa_tagging.py)."""
from __future__ import annotations

from typing import Literal

from encoderlab.core.errors import EncoderlabError, option
from encoderlab.tasks.baselines import abstain_baseline
from encoderlab.tasks.qa_loaders import HUB, load_hub_qa, load_offline_qa, load_squad_json
from encoderlab.tasks.registry import Body, Card, Export, Family, register, transformers_usage
from encoderlab.tasks.taskfile import SplitFiles, TaskFile


class QAFile(SplitFiles):
    family: Literal["qa"]


def load_user(file: TaskFile, holdout: str, *, fingerprint: str):
    return load_squad_json(*file.split_files(), name=file.name, holdout=holdout,  # type: ignore[arg-type]
                           fingerprint=fingerprint)


def export(protocol, body: Body) -> Export:
    """`*ForQuestionAnswering`: one Linear(h, 2) on every token, start and end logits; encoderlab's masking outside
    the context and its span search are decoding. EuroBERT has no such class: Llama's holds the same body."""
    kind = "llama" if body.kind == "eurobert" else body.kind
    prefix = "Llama" if body.kind == "eurobert" else body.prefix
    config = {"num_labels": 2} if body.transformers else {"is_causal": False}  # an encoder attends both ways
    if protocol.qa.format == "tagging":
        raise EncoderlabError("qa.format: tagging (a 2-label token head) is no question-answering "
                              f"class's head; fine-tune with {option('set', 'qa.format=spans')} to save it as "
                              f"{prefix}ForQuestionAnswering")
    return Export(f"{prefix}ForQuestionAnswering", kind,
                  {"proj.weight": "qa_outputs.weight", "proj.bias": "qa_outputs.bias"}, config)


usage = transformers_usage(
    "AutoModelForQuestionAnswering",
    'model(**tok(["the question"], ["the context"], return_tensors="pt"))  # start/end logits')


QA = register(Family(
    name="qa", category="QA", settings=QAFile, load_user=load_user, export=export,
    card=Card("question-answering", ("qa",),
              "encoderlab's answer is the best span over these start/end logits: positions outside the context "
              "masked, start <= end, at most the task's `max_answer_tokens` (30), the top 20 starts x top 20 ends. "
              "A context longer than `model_max_length` allows was split into windows overlapping by the task's "
              "`stride` (128 tokens, at most half a window: transformers' `stride` with "
              "`return_overflowing_tokens=True`), and the best span over all windows kept: one truncated input "
              "would lose the answers past its end.",
              usage),
    standard_metric="SQuAD f1",
    baselines={"first_span": "first span", "always_abstain": "always abstain"}, split_baselines=abstain_baseline,
    load_offline=load_offline_qa,
    paper=HUB, load_paper=load_hub_qa,  # qed: the authors' fourth QA set
    # The authors' code: the answer's tokens tagged by a 2-label token head on one truncated input.
    variants={"authors": {"qa": {"format": "tagging"}}}))
