"""The unit that flows from every text source into the tokenizer and the packer."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    """One pretraining document.

    `id` is stable across runs (a path and index, an article title, a dataset row) so that a corpus can be audited;
    `source` names where it came from (e.g. "imdb", "wikipedia", "local:reviews.jsonl").
    """

    id: str
    source: str
    text: str
    own: tuple = ()  # (field, value) pairs: a JSON Lines record's own `id` and `source`, which the corpus keeps
