"""Sequence classification (SC): one text or a pair, a label per example (tasks/classification.py is its task)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from encoderlab.core.errors import DataError, EncoderlabError, option
from encoderlab.core.io import file_digest
from encoderlab.tasks.baselines import tfidf_baselines
from encoderlab.tasks.common import read_table
from encoderlab.tasks.classification import (
    GLUE,
    GLUE_HUB,
    load_glue,
    load_offline_classification,
    load_user_classification,
)
from encoderlab.tasks.label_names import READINGS
from encoderlab.tasks.mteb_tasks import classification_task
from encoderlab.tasks.registry import Body, Card, Export, Family, not_saved, register, transformers_usage
from encoderlab.tasks.taskfile import SplitFiles, TaskFile


class ClassificationFile(SplitFiles):
    family: Literal["classification"]
    text_column: str | list[str] = Field("text", description="one column, or two for a pair")
    label_column: str = "label"


def load_user(file: TaskFile, holdout: str, *, fingerprint: str):
    settings, (train, validation, test) = file.settings, file.split_files()
    return load_user_classification(train, validation, test, settings.text_column,  # type: ignore[arg-type]
                                    settings.label_column, name=file.name, holdout=holdout, fingerprint=fingerprint)


def label_reading(file: TaskFile) -> dict:
    """{} where every label reads as encoderlab first read it; else `{"labels": N}`, N the oldest of its readings
    (`label_names.READINGS`, 1 the first) that reads every label as today's does: records were made under that
    reading and are of today's classes (a file marked 2, whose "1.0" the second reading made class 1, keeps its
    records where no label reads otherwise today), while a file with a label no earlier reading reads as today
    ("1e2" is class 100, "True" class true since the third) gets a fingerprint of its own. A file that cannot be
    read adds nothing: loading it says why."""
    column, paths = file.settings.label_column, [p for p in file.split_files() if p]
    try:
        known = (column, *(file_digest(Path(p)) for p in paths))  # by content: each file is parsed once a process
        if known not in _READING:
            today, earlier = READINGS[-1], list(enumerate(READINGS[:-1], start=1))
            for row in (row for path in paths for row in read_table(path)):
                label = row.get(column)
                earlier = [(n, reading) for n, reading in earlier if reading(label) == today(label)]
                if not earlier:
                    break
            oldest = earlier[0][0] if earlier else len(READINGS)
            _READING[known] = {} if oldest == 1 else {"labels": oldest}
        return _READING[known]
    except (DataError, OSError, ValueError):
        return {}


_READING: dict[tuple, dict] = {}


# What a transformers encoder's own *ForSequenceClassification computes instead of encoderlab's head (transformers 5.24)
ENCODER_HEADS = {
    "bert": "BertForSequenceClassification reads the first token through BERT's pooler (dense -> tanh)",
    "roberta": "RobertaForSequenceClassification reads the first token through dense -> tanh",
    "xlm-roberta": "XLMRobertaForSequenceClassification reads the first token through dense -> tanh",
    "deberta-v2": "DebertaV2ForSequenceClassification reads the first token through its pooler (dense -> GELU)",
    "modernbert": "ModernBertForSequenceClassification, even with classifier_pooling: mean, adds a LayerNorm "
                  "(mean -> dense -> GELU -> LayerNorm -> Linear)",
}


def encoder_refusal(body: Body) -> str:
    how = ENCODER_HEADS.get(body.kind, f"{body.prefix}ForSequenceClassification pools and projects its own way")
    return (f"encoderlab's classification head mean-pools the last hidden states (-> Linear, or -> Linear -> GELU "
            f"-> Linear with dense_gelu), and no stock class computes that on a {body.kind} body: {how}; "
            f"{not_saved()}")


def export(protocol, body: Body) -> Export:
    """EuroBertForSequenceClassification with mean pooling computes encoderlab's `dense_gelu` head, and only that
    class does: the decoder families' classes read the last token, the encoders' the first (`ENCODER_HEADS`)."""
    if body.transformers:
        raise EncoderlabError(encoder_refusal(body))
    if body.kind != "eurobert":
        raise EncoderlabError(f"encoderlab's classification head mean-pools the tokens, and "
                              f"{body.prefix}ForSequenceClassification reads the last token: no stock class computes "
                              f"it on a body only a {body.kind} class holds (EuroBertForSequenceClassification "
                              f"does on a EuroBERT body, with {option('set', 'classification_head=dense_gelu')})")
    if protocol.classification_head != "dense_gelu":
        raise EncoderlabError("classification_head: linear (mean pooling -> Linear) is no stock class's "
                              f"head; fine-tune with {option('set', 'classification_head=dense_gelu')} (mean "
                              "pooling -> Linear -> GELU -> Linear), which EuroBertForSequenceClassification computes")
    return Export("EuroBertForSequenceClassification", body.kind,
                  {"0.weight": "dense.weight", "0.bias": "dense.bias", "2.weight": "classifier.weight",
                   "2.bias": "classifier.bias"}, {"classifier_pooling": "mean", **body.named_labels})


usage = transformers_usage(
    "AutoModelForSequenceClassification",
    'model(**tok(["a text"], return_tensors="pt")).logits.argmax(-1)  # id2label')


CLASSIFICATION = register(Family(
    name="classification", category="SC", settings=ClassificationFile, load_user=load_user, export=export,
    card=Card("text-classification", ("sentence_pairs", "classification_head"),
              "The prediction is the argmax of the logits (`id2label` names it).", usage),
    lexical_baselines=tfidf_baselines, standard_metric="accuracy",
    baselines={"majority": "majority class", "tfidf_logreg": "TF-IDF + LR"},
    load_offline=load_offline_classification, paper=dict.fromkeys(GLUE, GLUE_HUB), load_paper=load_glue,
    mteb=classification_task, reading=label_reading,
    # The authors' code: transformers' EuroBertForSequenceClassification head (mean pooling -> dense -> GELU -> linear).
    variants={"authors": {"classification_head": "dense_gelu"}}))
