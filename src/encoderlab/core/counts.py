"""A parameter count as summaries, model cards and an Encoder's line write it: in the unit that keeps its digits
(a tiny model of 42K parameters read `0.0M` when every count was in millions)."""
from __future__ import annotations


def parameters_text(count: int) -> str:
    """`41.6K`, `134.5M`, `1.2B`: one decimal of the largest unit the count reaches once rounded (the count
    itself below a thousand): 999,960 is `1.0M`, not `1000.0K`."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if round(count / scale * 1000, 1) >= 1000:  # the unit below would write 1000.0 or more
            return f"{count / scale:.1f}{unit}"
    return f"{count}"  # under a thousand: the count itself (0.0K says nothing)
