"""Token classification (TC): a tag per word, scored by entity F1 or tag accuracy (tasks/tokens.py is its task)."""
from __future__ import annotations

from typing import Literal

from encoderlab.core.errors import DataError
from encoderlab.tasks.registry import Body, Card, Export, Family, register, transformers_usage
from encoderlab.tasks.taskfile import SplitFiles, TaskFile
from encoderlab.tasks.tokens import CONLL_HUB, load_conll_columns, load_conll_like, load_offline_tokens


class TokensFile(SplitFiles):
    family: Literal["tokens"]
    word_column: int = 0
    tag_column: int = -1
    tag_scheme: Literal["iob1", "iob2", "bioes", "plain"] | None = None


def check_file(settings: TokensFile, where: str) -> None:
    if settings.word_column == settings.tag_column:
        raise DataError(f"{where}: word_column {settings.word_column} and tag_column {settings.tag_column} are the "
                        "same column: the model would read the gold tags")


def load_user(file: TaskFile, holdout: str, *, fingerprint: str):
    settings = file.settings
    return load_conll_columns(*file.split_files(), word_column=settings.word_column,  # type: ignore[arg-type]
                              tag_column=settings.tag_column, name=file.name, scheme=settings.tag_scheme,
                              fingerprint=fingerprint)


def load_paper(name: str, source: str | None, holdout: str, *, fingerprint: str):
    # the paper's token sets keep their splits
    return load_conll_like(name, source, fingerprint=fingerprint)  # type: ignore[arg-type]


def export(protocol, body: Body) -> Export:
    """`*ForTokenClassification`: one Linear on every token, its dropout off at inference as ours (a transformers
    encoder's class that adds layers before it is refused by hub/finetuned_transformers.py, naming them)."""
    name = "classifier" if body.encoder else "score"
    dropout = {} if body.encoder else {"classifier_dropout": protocol.tokens.dropout}
    return Export(f"{body.prefix}ForTokenClassification", body.kind,
                  {"weight": f"{name}.weight", "bias": f"{name}.bias"},
                  {**body.named_labels, **body.bidirectional, **dropout})


usage = transformers_usage(
    "AutoModelForTokenClassification",
    'model(**tok(["some words"], return_tensors="pt")).logits.argmax(-1)  # a tag per token')


def trivial_baseline(setting) -> str:
    """All "O" for chunk schemes; the most frequent train tag for plain tags (no "O" to predict)."""
    return "majority_tag" if setting("scheme") == "plain" else "all_o"


TOKENS = register(Family(
    name="tokens", category="TC", settings=TokensFile, load_user=load_user, export=export,
    card=Card("token-classification", ("tokens",),
              "A word's tag is read from its first sub-word's logits (`tokens.labels: first_subword`) or voted "
              "by its sub-words (`all_subwords`), as the protocol below says; words are encoded as running "
              "text, every word after the first with its leading space.", usage),
    standard_metric="seqeval entity_f1",
    baselines={"all_o": 'all "O"', "majority_tag": "majority tag"}, trivial_baseline=trivial_baseline,
    load_offline=load_offline_tokens, paper={name: hub for name, (hub, _) in CONLL_HUB.items()},
    load_paper=load_paper, check_file=check_file,
    # The authors' code: every sub-word carries its word's tag, dropout 0.1 before the head, scikit-learn's macro F1
    # per sentence.
    variants={"authors": {"tokens": {"labels": "all_subwords", "dropout": 0.1, "metric": "sentence_macro_f1"}}}))
