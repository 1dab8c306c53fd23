"""The report's input coverage: per task, how much of each split the protocol's max_length cut, and how many answers
truncation lost (QA tagging relabels them "no answer"), as the sweep recorded them (finetuning/sweep.py)."""
from __future__ import annotations

from encoderlab.study.tables import _table


def _share(n: int, total: int | None) -> str:
    return f"{n:,}" if not total else f"{n:,} of {total:,} ({100 * n / total:.1f}%)"


def coverage_row(task: str, cov: dict) -> list[str]:
    """One task's row: max_length, unit, what each part lost, the answers lost; "not recorded" for old records."""
    cut = cov.get("truncated")
    if not isinstance(cut, dict):
        return [task, str(cov.get("max_length") or "-"), "-", "not recorded", "not recorded"]
    totals = cov.get("truncation_totals") or {}
    parts = "; ".join(f"{part} {_share(n, totals.get(part))}" for part, n in cut.items() if part != "unit")
    lost, kept = cov.get("answers_lost"), cov.get("truncation_totals") is not None  # kept: a record that has both
    answers = ("-" if kept else "not recorded") if lost is None else "; ".join(f"{s} {n:,}" for s, n in lost.items())
    return [task, str(cov.get("max_length") or "-"), str(cut.get("unit", "inputs")), parts or "-", answers]


def coverage_section(res) -> str:
    """Per task, from the first model evaluated on it (the cut depends on the tokenizer: a model with another one,
    an imported architecture, may lose more or less)."""
    first = {}
    for ts in res.tasks.values():
        for name, t in ts.items():
            first.setdefault(name, t)
    rows = [coverage_row(name, (first[name].summary or {}).get("coverage") or {}) for name in res.task_names()]
    if not rows:
        return ""
    return ("## Input coverage (truncation)\n\n"
            "What the protocol's `max_length` cut from each task's inputs, per split, in the unit the task counts "
            "(examples, words whose first sub-word was cut off, questions, texts), and the answers that truncation "
            "removed from the input (QA tagging: labelled \"no answer\", so always abstaining scores them). From the "
            "newest record of the first model evaluated on each task; a model with another tokenizer may lose more "
            "or less. \"not recorded\": records made before the sweep kept these counts (its log printed them).\n\n"
            + _table(["task", "max_length", "unit", "cut, per split", "answers lost to truncation"], rows) + "\n")
