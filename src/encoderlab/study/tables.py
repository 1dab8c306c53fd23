"""The report's table helpers: numbers, Markdown tables, CSV files (report.py and reference.py share them)."""
from __future__ import annotations

import csv
from pathlib import Path


def _fmt(x: float | None, ci: float | None = None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if ci is None else f"{x:.2f} ± {ci:.2f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
