"""The Python API's arguments (encoderlab/api.py): their types as the functions annotate them, and `checked`, which
holds every call to its annotations strictly and says a wrong argument as the command line says a wrong option: one
`EncoderlabError` naming the function, the argument and what it takes."""
from __future__ import annotations

import functools
import inspect
import json
import os
import re
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, validate_call

from encoderlab.core.config import annotation_kinds, booleans_in
from encoderlab.core.errors import CALLER, PATH_ARGUMENTS, EncoderlabError

Log = Callable[[str], None]
Overrides = Sequence[str] | Mapping[str, object]
PathLike = str | Path
TaskNames = Sequence[str] | str  # mteb's tasks: named so that a refusal says task names, not texts
Positive = Annotated[int, Field(ge=1)]


def checked(fn):
    """Arguments checked against `fn`'s annotations before it runs: a wrong type or value is one `EncoderlabError`
    naming the argument and what it takes, as the command line refuses a bad option. Strictly: pydantic's lax mode
    would read `resume="yes"` as True, `b"path"` as "path" and `lr="1e-3"` as 0.001, guesses a caller never sees."""
    validated = validate_call(config=ConfigDict(arbitrary_types_allowed=True, strict=True))(fn)
    params = list(inspect.signature(fn).parameters.values())

    @functools.wraps(fn)
    def call(*args, **kwargs):
        args, kwargs = tuple(map(_python_scalar, args)), {k: _python_scalar(v) for k, v in kwargs.items()}
        refuse_booleans_for_numbers(fn, args, kwargs)
        args, kwargs = whole_numbers(fn, args, kwargs)
        refuse_empty_paths(fn, params, args, kwargs)
        caller = CALLER.set("api")  # a refusal names `force=True`, not `--force` (core/errors.py `option`)
        paths = PATH_ARGUMENTS.set(path_arguments(params, args, kwargs))  # and a missing path its argument
        try:
            return validated(*args, **kwargs)
        except ValidationError as exc:
            if exc.title not in (fn.__name__, fn.__qualname__):  # raised inside the function, not by its arguments
                raise
            raise EncoderlabError(_argument_problem(fn, params, exc.errors(), args, kwargs)) from None
        finally:
            PATH_ARGUMENTS.reset(paths)
            CALLER.reset(caller)
    return call


def given_paths(params: list[inspect.Parameter], args: tuple, kwargs: dict) -> Iterator[tuple[str, str | Path]]:
    """(how the argument is named, the value as given) for each path of one call: `checkpoint` for a path,
    `tasks[1]` for one of a list of paths. Only the arguments annotated as paths are read (`embed`'s texts are no
    paths, and many); a value of another type is left to the type check."""
    paths = {p.name for p in params if "PathLike" in str(p.annotation)}
    named = [*zip((p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), args),
             *kwargs.items()]
    for name, value in ((n, v) for n, v in named if n in paths):
        many = isinstance(value, list | tuple)
        for i, one in enumerate(value if many else [value]):
            if isinstance(one, str | Path):
                yield f"{name}[{i}]" if many else name, one


def path_arguments(params: list[inspect.Parameter], args: tuple, kwargs: dict) -> dict[str, tuple[str, object]]:
    """{a path argument's value as a path: (how the argument is named, the value as given)} of one call; the first
    of a value wins (core/errors.py `given_as`)."""
    found: dict[str, tuple[str, object]] = {}
    for name, one in given_paths(params, args, kwargs):
        found.setdefault(str(Path(one)), (name, one))
    return found


def empty_path(value: object) -> str | None:
    """Why `value` names no path, for a refusal: an empty text is read as Path('') == Path('.'), the current folder,
    which no caller means by saying nothing (`load('')` read it, `prepare_data(out='')` wrote into it), and one of
    spaces alone is a slip of the same kind; None for a path. The command line refuses with it too (cli/paths.py)."""
    if not isinstance(value, str | Path) or str(value).strip():
        return None
    kind = "an empty" if not str(value) else "a blank"
    return f"{kind} path names no file or folder (give '.' for the current folder)"


def _names_a_path(value: str) -> str:
    """A config's path refused as an empty path argument is: raised inside pydantic, so the refusal names the file
    or the `--set` override that gave it (core/config.py `validate`)."""
    if (why := empty_path(value)) is not None:
        raise ValueError(why)
    return value


# A path-valued field of a config model (pretraining, study, task file): a file or folder, or what a path argument
# also takes in its place ('offline', a Hub id). An empty one was the current folder, or the folder of the file.
ConfigPath = Annotated[str, AfterValidator(_names_a_path)]


def refuse_empty_paths(fn, params: list[inspect.Parameter], args: tuple, kwargs: dict) -> None:
    """An empty or blank path argument refused before the call, naming it: `load: argument checkpoint='': ...`."""
    for name, value in given_paths(params, args, kwargs):
        if (why := empty_path(value)) is not None:
            raise EncoderlabError(f"{fn.__qualname__}: argument {name}={str(value)!r}: {why}")


def refuse_booleans_for_numbers(fn, args: tuple, kwargs: dict) -> None:
    """pydantic reads True as 1 where a number goes (`seed=True` would train seed 1): refused, naming the argument.
    The annotations are read only for a call that has a boolean (`embed` is called once a batch)."""
    if not any(isinstance(value, bool) for value in (*args, *kwargs.values())):
        return
    hints = typing.get_type_hints(fn, include_extras=True)
    try:
        given = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except TypeError:  # arguments that fit no call: pydantic's check names them
        return
    for name, value in given.items():
        if isinstance(value, bool) and name in hints and booleans_in(hints[name], value, [name]):
            raise EncoderlabError(f"{fn.__qualname__}: argument {name}={value}: takes a number, not a boolean")


def whole_numbers(fn, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A float that is a whole number (`max_documents=1e6`, `batch_size=32.0`) given where an argument takes a whole
    number and no other number, as the int it is: `overrides={"train.steps": 1e3}` is taken so (a config's key reads
    1000.0 as 1000), and an argument is not stricter than the config. 1.5, inf and nan stay floats, which the check
    refuses. The annotations are read only for a call that has a float (`embed` is called once a batch)."""
    if not any(type(value) is float for value in (*args, *kwargs.values())):
        return args, kwargs
    hints = typing.get_type_hints(fn, include_extras=True)
    positional = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def whole(name: str | None, value: object) -> object:
        if type(value) is not float or not value.is_integer() or name not in hints:
            return value
        kinds = annotation_kinds(hints[name])
        return int(value) if int in kinds and float not in kinds else value
    return (tuple(whole(positional[i] if i < len(positional) else None, v) for i, v in enumerate(args)),
            {name: whole(name, value) for name, value in kwargs.items()})


def _python_scalar(value: object) -> object:
    """A numpy number or boolean as the Python one it holds (a notebook's `np.arange` gives them; strict checking
    would refuse `batch_size=np.int64(32)`), a 1-d numpy array or pandas Series of texts as their list, any other
    os.PathLike of a text path (`zipfile.Path`, a library's path class) as a Path; anything else as it is."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    if _texts_array(value):
        return [str(text) for text in value.tolist()]  # type: ignore[attr-defined]
    if isinstance(value, os.PathLike) and not isinstance(value, Path) and isinstance(os.fspath(value), str):
        return Path(os.fspath(value))
    return value


def _texts_array(value: object) -> bool:
    """Whether `value` is a 1-d numpy array or pandas Series of texts only (`embed(df["text"])`): the list of texts
    it holds, as a numpy number is the Python one. An array of numbers or of more dimensions stays refused."""
    if type(value).__module__.partition(".")[0] not in ("numpy", "pandas") or getattr(value, "ndim", None) != 1:
        return False
    items = value.tolist() if callable(getattr(value, "tolist", None)) else None  # type: ignore[attr-defined]
    return isinstance(items, list) and all(isinstance(item, str) for item in items)


# How a type alias of this module reads in an error message (longest first: each replaces its text in turn)
READABLE = {"TaskNames": "a task name or a list of task names", "Sequence[str] | str": "a text or a list of texts",
            "Sequence[PathLike] | PathLike": "a task or a list of tasks (names or paths)",
            "PathLike | Mapping": "a path (str or Path) or a mapping", "PathLike": "a path (str or Path)",
            "Overrides": "a mapping or a list of 'key=value' strings",
            "Positive | str": "a whole number, 1 or more, or 'auto'", "Positive": "a whole number, 1 or more",
            " | None": " or None"}
# What pydantic's strict check of one plain type says, as an error line says it
STRICT = {"bool_type": "takes True or False", "int_type": "takes a whole number", "float_type": "takes a number",
          "string_type": "takes a text"}


def _argument_problem(fn, params: list[inspect.Parameter], errors: list, args: tuple, kwargs: dict) -> str:
    """'sweep: argument tasks=None: takes a list of paths ...' from pydantic's errors about one call."""
    where = errors[0]["loc"][0]
    unknown = [e["loc"][0] for e in errors if e["type"] == "unexpected_keyword_argument"]
    if unknown:
        takes = ", ".join(p.name for p in params if p.name != "self")
        given = ", ".join(f"{name}={_shown(kwargs.get(name), 40)}" for name in unknown)
        return f"{fn.__qualname__}: unexpected argument{'s' * (len(unknown) > 1)} {given}: it takes {takes}"
    if errors[0]["type"] == "unexpected_positional_argument":
        shown = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        return f"{fn.__qualname__}: takes {shown} positional argument{'s' * (shown != 1)}, {len(args)} given"
    param = params[where] if isinstance(where, int) else next(p for p in params if p.name == where)
    given = args[where] if isinstance(where, int) else kwargs.get(where)
    wants = str(param.annotation)
    for alias, text in READABLE.items():
        wants = wants.replace(alias, text)
    one = errors[0]
    wants = (STRICT.get(one["type"]) or one["msg"].lower()) if len(errors) == 1 else f"takes {wants}"
    return f"{fn.__qualname__}: argument {param.name}={_shown(given, 80)}: {wants}"


def _shown(value: object, width: int) -> str:
    """A value's repr on one line, cut to `width`: a pandas Series or a 2-d array spans lines, a refusal does not."""
    return re.sub(r"\s*\n\s*", " ", repr(value))[:width]


def plain(value: object, where: str) -> object:
    """A value as YAML reads it: paths as text, tuples as lists, a numpy number (or a 0-d array or tensor) as the
    Python number, a 1-d numpy array or tensor as the list it holds (`optim.betas=np.array([0.9, 0.95])`). An array
    of more dimensions is refused naming `where` (`overrides['optim.betas']`): no config key takes a table."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, f"{where}[{str(k)!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, where) for v in value]
    dims, as_list = getattr(value, "ndim", None), getattr(value, "tolist", None)
    if isinstance(dims, int) and callable(as_list):
        if dims > 1:
            raise EncoderlabError(f"{where}: a {dims}-d array is not a config value (give a list, a 1-d array or a "
                                  "number)")
        return plain(as_list(), where)
    return value


def set_strings(given: Overrides) -> list[str]:
    """`{"train.steps": 100}` or `["train.steps=100"]` -> the `--set` strings (values as JSON, which YAML reads)."""
    if not isinstance(given, Mapping):
        return list(given)
    sets = []
    for key, value in given.items():
        try:
            sets.append(f"{key}={json.dumps(plain(value, f'overrides[{key!r}]'))}")
        except (TypeError, ValueError):
            raise EncoderlabError(f"overrides[{key!r}]: {type(value).__name__} is not a config value (give text, "
                                  "numbers, booleans, lists or mappings)") from None
    return sets
