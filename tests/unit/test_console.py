"""The command line's consoles print user text as it is: no markup, no emoji codes."""
from __future__ import annotations

from rich.table import Table


def test_names_with_colons_are_printed_not_turned_into_emoji(capsys):
    """A study's checkpoint named `a` logged `done eval:a:t/reviews.yaml` as `done eval🅰t/reviews.yaml`."""
    from encoderlab.cli.console import error, log, out
    from encoderlab.runs.logging import Progress

    log("done eval:a:t/reviews.yaml [x]")
    error("task :smile: unknown")
    table = Table()
    table.add_column("task")
    table.add_row(":a:")
    out.print(table)
    Progress("run", 2, clock=lambda: 0.0).update(1, "eval:a:t lr=0.001")
    captured = capsys.readouterr()
    assert "done eval:a:t/reviews.yaml [x]" in captured.err and "task :smile: unknown" in captured.err
    assert ":a:" in captured.out and "eval:a:t lr=0.001" in captured.err
    assert "\U0001f170" not in captured.out + captured.err and "\U0001f604" not in captured.err
