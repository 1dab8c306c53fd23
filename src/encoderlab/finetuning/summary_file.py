"""The sweep's summary.json, one per protocol folder (finetuning/sweep.py `Sweep.summarize`): the grid each task in
it is written under. A protocol's grids share its folder (key algorithm 2, finetuning/migrate_protocol.py), and so
its tasks share the file: each task is counted under its own grid, named in its entry (`grid`), so that neither the
summary of one grid is lost to a sweep of part of it nor one task's to a sweep of another over other seeds.

A task's entry counts only the records of its data now (its fingerprint), so a grid is kept for it only where that
data has a record of every run of the grid: one held from the task's data before an edit (whose runs are filed
under the old fingerprint) would name runs the entry does not count.

A summary.json written before its entries named their grid counts every task under its top-level protocol's grid
(`task_grids`), as it was written."""
from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

Grid = tuple[list, list]  # (lrs, seeds)
Runs = Collection[tuple[float, int]]  # (lr, seed) of the runs a task's data now has a record of


def summary_grids(file: Path, grid: Grid, swept: Mapping[str, Runs], recorded: Mapping[str, Runs],
                  older: Sequence[Path] = ()) -> dict[str, Grid]:
    """The grid each `recorded` task (each with the runs recorded for the version of its data the file counts) is
    written under in summary.json: a task this sweep has (`swept`: each with the runs recorded for its data now,
    this sweep's included) by `task_grid`; any other keeps the grid the file holds for it or, where the file has
    none, the largest its key-1 folders' summaries (`older`) hold for it, else the LRs and seeds it has records of
    (a sweep of it stopped before it wrote the file): this sweep's grid is not one it ran."""
    held, earlier = held_grids(file), [held_grids(f) for f in older]
    grids = {}
    for task, runs in recorded.items():
        theirs = [g[task] for g in earlier if g.get(task) is not None]
        if task in swept:
            grids[task] = task_grid(held.get(task), grid, theirs, swept[task])
        else:
            grids[task] = held.get(task) or max(theirs, key=_runs, default=None) or grid_of_runs(runs)
    return grids


def grid_of_runs(runs: Runs) -> Grid:
    """The LRs and seeds of `runs` (a task whose runs are not every pair of them says so in its entry's
    `incomplete_lrs`)."""
    return sorted({lr for lr, _ in runs}), sorted({seed for _, seed in runs})


def task_grid(held: Grid | None, grid: Grid, older: Sequence[Grid] = (), done: Runs | None = None) -> Grid:
    """The grid a task this sweep has is written under: this sweep's, or the larger one the file already holds for
    it (`held`). One protocol's grids share a folder (records of each LR and seed are reused by every grid that has
    them), so a sweep of part of an earlier grid (`finetune`'s one run, a seed again) refreshes the earlier grid's
    summary instead of replacing it with its own fewer runs, and one run at another LR or seed does not replace it
    either; any other grid replaces it, as the newest sweep. Before the file holds the task, the earlier sweeps are
    those of the folder's key-1 folders (`older`: the task's grid in each of their summary.json files, one per grid;
    finetuning/migrate_keys.py): the largest that holds this one, as if they were made under key 2. An earlier
    grid is kept only where the task's data now has a record of each of its runs (`done`; None: not asked): one
    held from its data before an edit is replaced, as another grid is."""
    if held is not None:  # a single run (`finetune`) never replaces a summary of more runs, inside its grid or not
        kept = filled(held, done) and (holds(held, grid) or _runs(grid) == 1 < _runs(held))
        return held if kept else grid
    larger = [g for g in older if holds(g, grid) and filled(g, done)]
    return max(larger, key=_runs, default=grid)  # of equals, the first by folder name


def filled(grid: Grid, done: Runs | None) -> bool:
    """Whether each run of `grid` is one of `done` (LRs compared as records' file names write them)."""
    if done is None:
        return True
    have = {(f"{lr:g}", seed) for lr, seed in done}
    return all((f"{lr:g}", seed) in have for lr in grid[0] for seed in grid[1])


def held_grids(file: Path) -> dict[str, Grid | None]:
    """Each task's grid in the summary.json `file` ({}: none there, or not one this code reads)."""
    try:
        return task_grids(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def task_grids(summary) -> dict[str, Grid | None]:
    """Each task's grid in a stored summary: its entry's `grid` or, for a summary written before entries named it,
    its top-level protocol's, which was every task's. None where it names no grid this code reads."""
    tasks = summary.get("tasks") if isinstance(summary, dict) else None
    if not isinstance(tasks, dict):
        return {}
    every = grid_of(summary.get("protocol"))
    return {name: grid_of(t["grid"]) if isinstance(t, dict) and "grid" in t else every for name, t in tasks.items()}


def grid_of(protocol) -> Grid | None:
    """A stored protocol's (lrs, seeds); None where it names none of numbers (what `holds` compares)."""
    try:
        grid = list(protocol["lrs"]), list(protocol["seeds"])
    except (TypeError, KeyError):
        return None
    return grid if all(isinstance(v, (int, float)) for v in [*grid[0], *grid[1]]) else None


def common_grid(grids: Iterable[Grid | None]) -> Grid | None:
    """The grid every task of a summary has (None: they differ, or there is none)."""
    distinct = {(tuple(g[0]), tuple(g[1])) if g else None for g in grids}
    return next(((list(g[0]), list(g[1])) for g in distinct if g), None) if len(distinct) == 1 else None


def _runs(grid: Grid) -> int:
    return len(grid[0]) * len(grid[1])


def holds(larger: Grid | None, grid: Grid | None) -> bool:
    """Whether every run of `grid` is one of `larger`'s (False where either is unknown)."""
    return larger is not None and grid is not None and set(grid[0]) <= set(larger[0]) and set(grid[1]) <= set(larger[1])


def holds_tasks(larger: dict[str, Grid | None] | None, grids: dict[str, Grid | None]) -> bool:
    """Whether a summary of task grids `larger` holds every task of `grids` with every run of its grid."""
    return larger is not None and all(holds(larger.get(task), grid) for task, grid in grids.items())
