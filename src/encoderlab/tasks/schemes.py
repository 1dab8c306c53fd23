"""Tag schemes of token tasks, and the metric each one means.

    iob1   O, I-X inside a chunk, B-X only to start a chunk right after another X chunk (CoNLL-2003's original files)
    iob2   O, B-X starts every chunk, I-X continues it (the hub's CoNLL-2003, OntoNotes, UNER)
    bioes  O, B-X begins, I-X continues, E-X ends a chunk of several words, S-X is a one-word chunk
    plain  any tags, no chunks (POS tags)

The chunk schemes are scored with entity-level F1 by seqeval's default (conlleval) reading, which decodes all three
(a chunk's type and both boundaries must match); `plain` with token accuracy. A tag that does not belong to the
declared scheme is refused: one `B_person` among IOB tags would otherwise turn entity F1 into something else.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

Scheme = Literal["iob1", "iob2", "bioes", "plain"]
SCHEMES: tuple[str, ...] = ("iob1", "iob2", "bioes", "plain")
PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}


def metric_of(scheme: str) -> str:
    return "accuracy" if scheme == "plain" else "entity_f1"


def _split(tag: str) -> tuple[str, str]:
    prefix, dash, kind = tag.partition("-")
    return (prefix, kind) if dash and kind else (tag, "")


def first_invalid(tags: Sequence[str], scheme: str) -> tuple[int, str] | None:
    """(position, why) of the first tag of one sentence that `scheme` does not allow, or None."""
    if scheme == "plain":
        return None
    allowed = PREFIXES[scheme]
    inside = ""  # the type of the chunk still open after the previous tag
    for j, tag in enumerate(tags):
        prefix, kind = _split(tag)
        if tag != "O" and (prefix not in allowed or not kind):
            return j, f"not O or {', '.join(p + '-TYPE' for p in allowed)}"
        if scheme == "iob2" and prefix == "I" and inside != kind:
            return j, f"I-{kind} does not continue a B-{kind} or I-{kind} (under iob2 every chunk starts with B-)"
        if scheme == "bioes":
            if prefix in ("I", "E") and inside != kind:
                return j, f"{prefix}-{kind} does not continue a B-{kind} or I-{kind}"
            if prefix in ("B", "S", "O") and inside:
                return j, f"the {inside} chunk before it is not closed by E-{inside}"
        inside = kind if prefix in ("B", "I") else ""
    if scheme == "bioes" and inside:
        return len(tags) - 1, f"the sentence ends inside a {inside} chunk (no E-{inside})"
    return None


def derive(sentences: Iterable[Sequence[str]]) -> str | None:
    """The scheme all sentences fit (iob2 before iob1, then bioes), or None when no chunk scheme fits."""
    sentences = list(sentences)
    for scheme in ("iob2", "iob1", "bioes"):
        if all(first_invalid(tags, scheme) is None for tags in sentences):
            return scheme
    return None
