"""The one console of the command line: results on stdout (a table, or JSON with --json), logs on stderr."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)  # `:a:` in a name is no emoji
out = Console(highlight=False, soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 160)


def log(message: str) -> None:
    err.print(f"[dim]·[/dim] {escape(message)}")  # escaped: user text such as `lrs=[a]` is no markup


def error(message: str) -> None:
    err.print(f"[bold red]error:[/bold red] {escape(message)}")


def log_after(first: str):
    """A log that says `first` before its first message: what a command will use is told once the command has
    checked its inputs and starts to work, so a refusal stays one line."""
    pending = [first]

    def emit(message: str) -> None:
        while pending:
            log(pending.pop())
        log(message)
    return emit


def emit(summary: dict, as_json: bool, render) -> None:
    """A command's result: the summary as JSON on stdout (for scripts), or rendered for a reader."""
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render(summary)


STUDY_KEPT = "the study in {} stopped; the jobs it finished are kept: the same command{} goes on from them"


@contextmanager
def interrupt_said(line: str) -> Iterator[None]:
    """Ctrl-C inside the block: `line` (what stopped, what is kept) and exit code 130. Without it typer turns an
    interrupt into a silent 130, and `main` can only say `interrupted`."""
    try:
        yield
    except KeyboardInterrupt:
        log(f"interrupted: {line}")
        raise SystemExit(130) from None
