"""The sweep's summary.json, one per protocol folder (finetuning/sweep.py `Sweep.summarize`): the grid it is written
under. A protocol's grids share its folder (key algorithm 2, finetuning/migrate_protocol.py), so the summary of one
grid must not be lost to a sweep of part of it."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def summary_grid(file: Path, grid: tuple[list, list], older: Sequence[Path] = ()) -> tuple[list, list]:
    """The grid summary.json is written under: this sweep's, or the larger one it already holds. One protocol's
    grids share a folder (records of each LR and seed are reused by every grid that has them), so a sweep of part
    of an earlier grid (`finetune`'s one run, a seed again) refreshes the earlier grid's summary instead of
    replacing it with its own fewer runs, and one run at another LR or seed does not replace it either; any other
    grid replaces it, as the newest sweep. Before the folder has a summary, the earlier sweeps are those of its
    key-1 folders (`older`: their summary.json files, one per grid; finetuning/migrate_keys.py): the largest of
    their grids that holds this one, as if they were made under key 2."""
    held = _held_grid(file)
    if held is not None:  # a single run (`finetune`) never replaces a summary of more runs, inside its grid or not
        return held if _holds(held, grid) or _runs(grid) == 1 < _runs(held) else grid
    larger = [g for g in map(_held_grid, older) if g is not None and _holds(g, grid)]
    return max(larger, key=_runs, default=grid)  # of equals, the first by folder name


def _held_grid(file: Path) -> tuple[list, list] | None:
    """The grid of the summary.json `file` (None: none there, or not one this code reads)."""
    try:
        held = json.loads(file.read_text(encoding="utf-8"))["protocol"]
        grid = list(held["lrs"]), list(held["seeds"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return grid if all(isinstance(v, (int, float)) for v in [*grid[0], *grid[1]]) else None  # what `_holds` sets


def _runs(grid: tuple[list, list]) -> int:
    return len(grid[0]) * len(grid[1])


def _holds(larger: tuple[list, list], grid: tuple[list, list]) -> bool:
    return set(grid[0]) <= set(larger[0]) and set(grid[1]) <= set(larger[1])
