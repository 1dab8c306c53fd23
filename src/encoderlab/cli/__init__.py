"""The command line: thin typer commands (parse -> build -> run) over the packages below; one console."""
import sys

from encoderlab.cli.commands import app
from encoderlab.cli.console import err, error
from encoderlab.cli.paths import refuse_empty_paths
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_failure
from encoderlab.core.process import keep_freed_memory

__all__ = ["app", "main"]

refuse_empty_paths(app)  # every command, once all are registered (cli/paths.py)


def main() -> None:
    """The `encoderlab` command: a user's mistake is one line and exit code 2, never a traceback; a run that
    failed for a reason the user can act on (a diverged pretraining run, a full disk) is one line and exit code 1."""
    keep_freed_memory()  # the process is ours: training steps reuse freed pages (core/process.py)
    try:
        code = app(standalone_mode=False)  # typer's own error box is several lines: `usage_error` says it in one
    except click_exception() as exc:
        if exc.format_message():  # empty: no command given, and the help that says them is shown
            error(usage_error(exc))
        raise SystemExit(exc.exit_code) from None
    except EncoderlabError as exc:
        error(str(exc))
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None
    except OSError as exc:  # a full disk or lost permission where no writer names its file (appends to logs)
        cause = write_failure(exc)
        if cause is None:
            raise  # a bug keeps its traceback
        error(f"cannot write: {cause}")
        raise SystemExit(1) from None  # a write fails once work has started (errors.py WriteFailed)
    if code == 130:  # Ctrl-C that no command said itself (typer returns it as a silent 130)
        err.print("interrupted")
    raise SystemExit(code if type(code) is int else 0)  # an exit code (--help: 0, Ctrl-C: 130), or None


def click_exception() -> type[Exception]:
    """The exception class of a wrong command line: typer's own copy of click's (typer >= 0.22), or click's."""
    try:
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException
    return ClickException


def usage_error(exc) -> str:
    """A wrong command line in one line: the command, what is wrong, where the options are listed. The option
    parser's own errors (`--set` without a value) carry no context: the command is read off the arguments then."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else command_path(sys.argv[1:])
    return f"{path}: {exc.format_message()} (see {path} --help)"


def command_path(argv: list[str]) -> str:
    """`encoderlab study run` from `['study', 'run', 'x.yaml', ...]`: the leading words that name subcommands."""
    import typer.main

    command, path = typer.main.get_command(app), ["encoderlab"]
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    return " ".join(path)
