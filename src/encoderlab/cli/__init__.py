"""The command line: thin typer commands (parse -> build -> run) over the packages below; one console."""
from encoderlab.cli.commands import app, main

__all__ = ["app", "main"]
