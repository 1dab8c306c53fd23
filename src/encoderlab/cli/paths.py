"""The command line's path arguments, checked as the Python API checks its own (core/arguments.py `checked`): an
empty or blank path is refused in one line naming the argument or option (`encoderlab export: --out '': ...`),
before the command runs. Path('') is Path('.'), so `--out ''` wrote into the current folder."""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import typer
from typer.models import ArgumentInfo, OptionInfo

from encoderlab.core.arguments import empty_path
from encoderlab.core.errors import EncoderlabError

# A text argument that names a file or folder, or something else by name ('offline', 'smollm2', a Hub id, a paper
# dataset): typer reads it as the text given (a Path would drop `./` and a trailing `/` of what the user typed),
# and an empty one is refused as an empty Path is.
PathText = str
# The annotations of a path parameter as the command modules write them (`from __future__ import annotations`
# keeps them as text): Path or PathText, alone, optional or in a list.
PATH_ANNOTATION = re.compile(r"\bPath(Text)?\b")


def refuse_empty_paths(app: typer.Typer, command: str = "encoderlab") -> None:
    """Every command of `app` and of its groups (`data`, `study`) refuses an empty or blank path as it reads its
    command line. The check is the parser of each path parameter (typer's `parser`): it sees the text as typed,
    where the command's own code gets Path('.') for ''."""
    for info in app.registered_commands:
        name = f"{command} {info.name or info.callback.__name__.replace('_', '-')}"
        for param in inspect.signature(info.callback).parameters.values():
            declared, annotation = param.default, str(param.annotation)
            is_path = PATH_ANNOTATION.search(annotation) is not None
            if is_path and isinstance(declared, ArgumentInfo | OptionInfo) and declared.parser is None:
                declared.parser = _parser(name, param, str if "PathText" in annotation else Path)
    for group in app.registered_groups:
        refuse_empty_paths(group.typer_instance, f"{command} {group.name}")


def _parser(command: str, param: inspect.Parameter, kind: type) -> Callable[[object], object]:
    """The value as `kind` (Path or str), or one line naming the command and the parameter: `encoderlab export:
    --out '': an empty path names no file or folder ...`."""
    def parse(value: object) -> object:
        if (why := empty_path(value)) is not None:
            raise EncoderlabError(f"{command}: {_named(param)} {str(value)!r}: {why}")
        return kind(value)
    parse.__name__ = "path" if kind is Path else "text"  # click's name of the type, shown in --help before typer 0.22
    return parse


def _named(param: inspect.Parameter) -> str:
    """A parameter as the command's usage line names it: `CHECKPOINT` for an argument, `--out` for an option."""
    info = param.default
    if isinstance(info, ArgumentInfo):
        return info.metavar or param.name.upper()
    decls = [d for d in (info.param_decls or ()) if d.startswith("--")] if isinstance(info, OptionInfo) else []
    return decls[0] if decls else f"--{param.name.replace('_', '-')}"
