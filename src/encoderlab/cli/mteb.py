"""`encoderlab mteb`: the mteb library's scores of a model (hub/mteb_eval.py), each beside encoderlab's baselines."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from encoderlab.cli.console import emit, log, out
from encoderlab.core.errors import EncoderlabError


def mteb_cmd(
    model: Path = typer.Argument(..., help="An encoderlab checkpoint or run folder (exported to sentence-transformers "
                                           "in a temporary folder), a sentence-transformers folder, a transformers "
                                           "encoder folder (mean-pooled) or minilm-l6 (all-MiniLM-L6-v2)."),
    more: list[str] = typer.Argument(None, hidden=True, help="The tasks after the first of --tasks."),
    tasks: list[str] = typer.Option(..., "--tasks", help="Offline retrieval or classification tasks (wiki-title, "
                                                         "rt-polarity, ...) or MTEB task names (need the Hub): "
                                                         "--tasks T1 T2 ..."),
    out_dir: Path = typer.Option(..., "--out", help="The folder to write: mteb's result files and summary.json."),
    batch_size: int = typer.Option(32, help="Texts embedded at once."),
    force: bool = typer.Option(False, help="Replace --out if it exists and is not empty."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
) -> None:
    """Score a model with the mteb library (frozen embeddings), each score beside encoderlab's baselines."""
    from encoderlab.hub.mteb_eval import run_mteb

    if batch_size < 1:
        raise EncoderlabError(f"--batch-size {batch_size}: give 1 or more")
    summary = run_mteb(model, [*tasks, *(more or [])], out_dir, force=force, batch_size=batch_size, log=log)
    emit(summary, as_json, _render_mteb)


def _render_mteb(s: dict) -> None:
    table = Table(title=f"MTEB (mteb {s['mteb_version']}, frozen embeddings) of {s['model']}", title_justify="left")
    for col in ("task", "metric", "test", "baselines (test)"):
        table.add_column(col, justify="right" if col == "test" else "left")
    for row in s["tasks"]:
        beside = ", ".join(f"{name} {value:.2f}" for name, value in row["baselines"].items()) or "-"
        table.add_row(row["task"], row["metric"], f"{row['score']:.2f}", beside)
    out.print(table)
    for row in s["tasks"]:
        if row.get("warning"):  # as the sweep warns of a model that learned nothing
            out.print(f"[yellow]{row['task']}: {row['warning']}: this score is not evidence that "
                      "its embeddings carry the task[/]")
    out.print(f"[bold]results[/bold] {s['results']} (mteb's files), summary {Path(s['out']) / 'summary.json'}")
