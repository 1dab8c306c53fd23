"""A parameter count as summaries, model cards and an Encoder's line write it: in the unit that keeps its digits
(a tiny model of 42K parameters read `0.0M` when every count was in millions)."""
from __future__ import annotations


def parameters_text(count: int) -> str:
    """`41.6K`, `134.5M`, `1.2B`: one decimal of the largest unit the count reaches (K below a million)."""
    scale, unit = (1e9, "B") if count >= 1e9 else (1e6, "M") if count >= 1e6 else (1e3, "K")
    return f"{count / scale:.1f}{unit}"
