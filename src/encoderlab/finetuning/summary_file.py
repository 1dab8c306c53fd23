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
        return held if holds(held, grid) or _runs(grid) == 1 < _runs(held) else grid
    larger = [g for g in map(_held_grid, older) if g is not None and holds(g, grid)]
    return max(larger, key=_runs, default=grid)  # of equals, the first by folder name


def _held_grid(file: Path) -> tuple[list, list] | None:
    """The grid of the summary.json `file` (None: none there, or not one this code reads)."""
    try:
        return grid_of(json.loads(file.read_text(encoding="utf-8"))["protocol"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def grid_of(protocol) -> tuple[list, list] | None:
    """A stored protocol's (lrs, seeds); None where it names none of numbers (what `holds` compares)."""
    try:
        grid = list(protocol["lrs"]), list(protocol["seeds"])
    except (TypeError, KeyError):
        return None
    return grid if all(isinstance(v, (int, float)) for v in [*grid[0], *grid[1]]) else None


def _runs(grid: tuple[list, list]) -> int:
    return len(grid[0]) * len(grid[1])


def holds(larger: tuple[list, list] | None, grid: tuple[list, list] | None) -> bool:
    """Whether every run of `grid` is one of `larger`'s (False where either is unknown)."""
    return larger is not None and grid is not None and set(grid[0]) <= set(larger[0]) and set(grid[1]) <= set(larger[1])
