"""The command line: thin typer commands (parse -> build -> run) over the packages below; one console."""
from encoderlab.cli.commands import app
from encoderlab.cli.console import err, error
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_failure
from encoderlab.core.process import keep_freed_memory

__all__ = ["app", "main"]


def main() -> None:
    """The `encoderlab` command: a user's mistake is one line and exit code 2, never a traceback; a run that
    failed for a reason the user can act on (a diverged pretraining run, a full disk) is one line and exit code 1."""
    keep_freed_memory()  # the process is ours: training steps reuse freed pages (core/process.py)
    try:
        app()
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
