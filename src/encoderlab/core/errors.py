"""User-facing errors.

Anything the user can fix (a missing file, a wrong column, a bad value) raises `EncoderlabError` with a message that
says what is wrong, where, and what is allowed. The CLI prints such errors in one line without a traceback; any other
exception is a bug and keeps its traceback. What is not wrong but should be known (the data gave a smaller
vocabulary than asked) is a warning (`warn`).
"""

import sys
import warnings
from collections.abc import Callable
from contextvars import ContextVar

# Who is calling: "cli" (the command line) or "api" (encoderlab.api's functions set it while they run), so that a
# refusal names an option as that caller gives it (`option`).
CALLER: ContextVar[str] = ContextVar("encoderlab_caller", default="cli")
# The command line's options whose Python API argument has another name than the option's with _ for -
API_NAMES = {"set": "overrides", "as": "kind", "eval": "evaluation"}
# The text and path arguments of the Python API call in progress (`core/arguments.py` `checked` sets them), by
# their value as a path, so that a path refused far below the call names the argument that gave it (`given_as`).
PATH_ARGUMENTS: ContextVar[dict[str, tuple[str, object]] | None] = ContextVar("encoderlab_path_arguments",
                                                                              default=None)


def option(name: str, *values: object, quote: bool = False) -> str:
    """An option in a message, as the caller gives it: `--force`, `--out DIR`, `--set name=... --set k=v` on the
    command line; `force=True`, `out='DIR'`, `overrides={"name": ..., "k": v}` from the Python API. `name` is the
    command line's option without its dashes; a `set` value is "key=value", its value shown as given. `quote`: the
    command line's value quoted too (`--head 'random'`)."""
    if CALLER.get() == "cli":
        shown = [repr(value) if quote else value for value in values]
        return " ".join(f"--{name} {value}" for value in shown) if values else f"--{name}"
    arg = option_name(name)
    if name == "set":
        pairs = (str(value).partition("=") for value in values)
        return f"{arg}={{" + ", ".join(f'"{key}": {value}' for key, _, value in pairs) + "}"
    if not values:
        return f"{arg}=True"
    value = values[0]
    return f"{arg}={str(value)!r}" if not isinstance(value, int | float) else f"{arg}={value}"


def option_name(name: str) -> str:
    """The option alone, as the caller names it: `--out` on the command line, `out` from the Python API."""
    return f"--{name}" if CALLER.get() == "cli" else API_NAMES.get(name, name.replace("-", "_"))


def option_value(name: str, value: object) -> str:
    """An option with its value, as the caller wrote it: `--seq-len 4` on the command line, `seq_len=4` from the
    Python API."""
    return f"--{name} {value}" if CALLER.get() == "cli" else f"{option_name(name)}={value!r}"


def argument(name: str, value: object) -> str:
    """A positional argument in a message, as the caller gives it: `MODEL path` on the command line (its usage line's
    name), `model='path'` from the Python API."""
    return f"{name.upper()} {value}" if CALLER.get() == "cli" else f"{name}={str(value)!r}"


def command(cli: str, api: str) -> str:
    """A command that a message tells the caller to run, as that caller runs it: `cli` on the command line
    (`encoderlab import-hf SRC --out CKPT`), `api` from the Python API (`encoderlab.import_hf('SRC', out=CKPT)`), its
    function in encoderlab.api."""
    return cli if CALLER.get() == "cli" else api


def prepare_command(source: object = "SRC", out: object = None, *, force: bool = False,
                    tokenizer: object = None) -> str:
    """`encoderlab data prepare` as the caller runs it: `encoderlab data prepare SRC --out OUT --force` on the command
    line, `encoderlab.prepare_data(SRC, out='OUT', force=True)` from the Python API. A value in capitals (`SRC`,
    `FOLDER`) is a placeholder and stays bare; a path or a name is quoted in the API's form."""
    import re

    def shown(value: object) -> str:
        return str(value) if re.fullmatch(r"[A-Z][A-Z_]*", str(value)) else repr(str(value))

    options = [(name, value) for name, value in (("out", out), ("tokenizer", tokenizer)) if value is not None]
    cli = " ".join(["encoderlab data prepare", str(source), *(f"--{name} {value}" for name, value in options),
                    *(["--force"] if force else [])])
    api = ", ".join([shown(source), *(f"{name}={shown(value)}" for name, value in options),
                     *(["force=True"] if force else [])])
    return command(cli, f"encoderlab.prepare_data({api})")


def given_as(path) -> str:
    """`checkpoint='nope': ` where the Python API call in progress was given `path` as an argument, to begin the
    refusal of a path that is not there (`sweep(checkpoint='nope')` names the argument, as its other refusals do);
    '' on the command line, whose refusal begins with the path itself, and for a path that no argument gave (a
    config's or a task file's)."""
    from pathlib import Path

    if CALLER.get() != "api" or (found := (PATH_ARGUMENTS.get() or {}).get(str(Path(path)))) is None:
        return ""
    name, value = found
    return f"{name}={str(value)!r}: "


class EncoderlabError(Exception):
    """An error caused by input or environment that the user can fix."""


class EncoderlabWarning(UserWarning):
    """Work done as asked, with something the caller should know (`warn`)."""


def warn(message: str, log: Callable[[str], None], label: str = "warning") -> None:
    """Say `message` where its caller looks for a warning: on the command line, a `warning: ...` line of the log
    (stderr, beside the progress lines); from the Python API, an EncoderlabWarning through Python's `warnings`,
    attributed to the caller's line (shown on stderr once per line by default; a script filters it or makes it an
    error), since the API's log is a script's stdout by default. `label`: the line's first word on the command line."""
    if CALLER.get() == "cli":
        log(f"{label}: {message}")
        return
    frame, level = sys._getframe(1), 2  # 1 would be the line below, 2 the line that called `warn`
    while frame is not None and str(frame.f_globals.get("__name__")).partition(".")[0] in ("encoderlab", "pydantic"):
        frame, level = frame.f_back, level + 1  # up to the caller's line, past encoderlab and its argument checks
    warnings.warn(message, EncoderlabWarning, stacklevel=level)


class Failed(EncoderlabError):
    """Work that started and failed for a reason the user can act on (a diverged run, a study with failed jobs): one
    line, like a refusal, but exit code 1: the input was accepted and work was done."""

    exit_code = 1


class WriteFailed(Failed):
    """A write that failed once work had started (a full disk, a quota, the file size limit, lost permissions):
    the input was accepted, so exit code 1 like any failed work; an output refused before any work is exit 2."""


class ChecksumError(EncoderlabError):
    """A downloaded file does not have the pinned sha256."""


class DataError(EncoderlabError):
    """A data source is missing, empty, malformed or unreachable."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says memory ran out: Python's MemoryError, torch's `OutOfMemoryError` (CUDA: a RuntimeError
    saying "out of memory") or the CPU allocator's RuntimeError ("can't allocate memory"). What a process that the
    kernel's out-of-memory killer ends raises is nothing: it is gone (a study or sweep names its dead worker)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)


def short(value, width: int = 40) -> str:
    """A value's repr for an error line, cut to `width` characters: a name or a text may be any length."""
    return repr(value) if len(repr(value)) <= width else repr(value)[: width - 4] + "...'"


def listed(values, most: int = 5, width: int = 40) -> str:
    """Values for an error line, kept to one readable line however many there are or however long each is (a text
    column given as a label column has thousands of paragraphs): the first `most`, each cut to `width` characters,
    and how many more."""
    values = list(values)
    shown = [short(v, width) for v in values[:most]]
    more = f" and {len(values) - most} more" if len(values) > most else ""
    return "[" + ", ".join(shown) + "]" + more


def resolved(path, given=None, base: str = "the current folder") -> str:
    """A path for an error line: where it was looked for (absolute), and, when the user gave it relative, what they
    gave and the folder it was read from (a pretraining config's paths are read from the current folder, a task
    file's from the task file's folder)."""
    from pathlib import Path

    given = Path(path) if given is None else Path(given)
    if given.is_absolute():
        return str(Path(path).absolute())
    return f"{Path(path).absolute()} ({str(given)!r} read from {base})"
