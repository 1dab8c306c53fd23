"""Typed configuration: YAML files, dotted overrides, and errors that name the key, the value and what is allowed."""
from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from encoderlab.core.errors import CALLER, EncoderlabError, given_as, option, option_name, resolved

T = TypeVar("T", bound=BaseModel)


class ConfigError(EncoderlabError):
    """A configuration file or override is invalid."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error, not last-wins: a second `optim:`
    block would otherwise drop the first block's keys without a word. Every YAML encoderlab reads goes through it
    (`read_yaml`)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges, it names no key
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first
                except TypeError:  # an unhashable key: the safe loader's own error names it
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice in one mapping (first on line "
                        f"{first[key].line + 1}): keep one", key_node.start_mark)
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def read_yaml(text: str):
    """YAML text as Python values, a repeated key refused (`StrictLoader`): the one way encoderlab parses YAML."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = (), *, shipped: str | None = None) -> dict:
    """Load a YAML mapping; a top-level `base: other.yaml` (relative to this file) is loaded first and this file's
    keys are merged over it, section by section. `shipped`: the folder of the configs shipped with encoderlab that
    this file is one of the kind of ("pretrain", "eval", "studies"), for the refusal of a missing file."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{given_as(path)}config file not found: {resolved(path)}{_shipped_hint(path, shipped)}")
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: give a YAML config file")
    if path.resolve() in _seen:
        raise ConfigError(f"config {path} includes itself through 'base'")
    try:
        data = {} if (data := read_yaml(path.read_text(encoding="utf-8"))) is None else data  # `[]` is no mapping
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections at the top level, not {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base: {base!r}: takes the path of a YAML config, relative to this file's folder")
    if not (path.parent / base).exists():  # named as written, with the file that wrote it, not as a path given here
        raise ConfigError(f"{path}: base: {base}: config file not found: "
                          f"{resolved(path.parent / base, base, f'the folder of {path}')}")
    return deep_merge(load_yaml(path.parent / base, (*_seen, path.resolve())), data)


def shipped_config(path: str | Path, kind: str) -> Path | None:
    """The config shipped with encoderlab (under `CONFIGS / kind`) that a missing `path` names: a path of the docs
    (`configs/pretrain/demo-tiny.yaml`) read from a folder other than a clone's, or a shipped config's name
    (`demo-tiny`, `paper/base.yaml`); of several of one name, the one whose path under `kind` the given path ends
    with; else None."""
    from encoderlab.core.io import CONFIGS

    given = Path(path)
    if given.suffix not in ("", ".yaml", ".yml"):
        return None
    folder = CONFIGS.resolve() / kind
    named = [f for f in sorted(folder.rglob("*.yaml")) if f.stem == given.stem]
    if len(named) > 1:  # the longer the tail of the given path a shipped path is, the surer the match
        named = [f for f in named if given.with_suffix("").parts[-len(f.relative_to(folder).parts):]
                 == f.relative_to(folder).with_suffix("").parts]
    return named[0] if len(named) == 1 else None


def _shipped_hint(path: Path, kind: str | None) -> str:
    """'; encoderlab ships configs/KIND/NAME.yaml: give its path, ...' for a missing config that names a shipped one;
    the shipped file is pointed to, never read in its place (the user named another file). Copying the folder, not
    the file, keeps a study's and a preset's relative paths (`../pretrain/...`, `base:`) working."""
    from encoderlab.core.io import CONFIGS

    found = shipped_config(path, kind) if kind else None
    if found is None:
        return ""
    root = CONFIGS.resolve()
    name = found.relative_to(root).as_posix()
    if CALLER.get() == "api":
        return f'; encoderlab ships configs/{name}: give encoderlab.CONFIGS / "{name}" ({found})'
    return (f"; encoderlab ships configs/{name}: give its path, {found}, or copy the shipped configs here to edit "
            f"them (cp -r {shlex.quote(str(root))} .)")


def deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# The --set help of every command that takes it (apply_overrides).
SET_MERGES = ("A mapping updates its section key by key (--set 'SECTION={KEY: VALUE}' keeps the section's other "
              "keys); SECTION!=VALUE replaces the whole section, its other keys back to their defaults.")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """`["train.lr=3e-4", "objective=clm"]` -> nested updates; values are parsed as YAML (scalars, lists, mappings).
    A mapping updates the section it is given for, key by key (`lr_schedule={warmup_steps: 1}` keeps the section's
    other keys): replacing a whole section, its other keys back to their defaults, is asked for with `KEY!=VALUE`."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        replace = key.strip().endswith("!")
        key = key.strip().removesuffix("!").strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.key=value (or section!=value to replace a "
                              "whole section)")
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is a value, not a section")
            node = child
        value, old = _parse_value(raw), node.get(parts[-1])
        merge = isinstance(value, dict) and isinstance(old, dict) and not replace
        node[parts[-1]] = deep_merge(old, value) if merge else value
    return data


def _parse_value(raw: str):
    try:
        value = read_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{option_name('set')} value {raw!r} is not valid YAML: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    if isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "3e-4" as a string; users mean a number
        except ValueError:
            pass
    return value


def validate(model: type[T], data: dict[str, Any], where: str, overrides: list[str] = ()) -> T:
    """`model` from `data`, or one line naming each bad key, its value and what is allowed; a key that came from an
    override (`--set key=value`) is blamed on that override, not on the file it overrode."""
    if found := booleans_for_numbers(model, data):
        raise ConfigError("; ".join(f"{_blamed(overrides, loc, where)}: {'.'.join(loc)}: takes a number, not "
                                    f"{str(value).lower()}" for loc, value in found)
                          + " (YAML reads yes/no/true/false/on/off as booleans)")
    problems = [f"{_blamed(overrides, loc, where, unknown=True)}: {'.'.join(loc)}: unknown key"
                f"{_unknown_hint(model, loc)}" for loc in unknown_extras(model, data)]
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        problems += [_problem(model, e, where, overrides) for e in exc.errors()]
    if problems:
        raise ConfigError("; ".join(dict.fromkeys(problems)))
    if GIVEN in model.__private_attributes__:
        setattr(validated, GIVEN, Given(where, tuple(overrides)))
    return validated


# The private attribute (a `Given`) in which a config whose model declares it keeps where its keys were given.
GIVEN = "_given"


@dataclasses.dataclass(frozen=True)
class Given:
    """Where a config's keys were given (`validate`'s file and overrides), kept for a check that can be made only
    later, once the data is read (`blamed_later`). No part of the config's value: configs of the same settings are
    equal wherever they were read from (a run's config.yaml read back equals the config that wrote it)."""

    where: str | None = dataclasses.field(default=None, compare=False)
    overrides: tuple[str, ...] = dataclasses.field(default=(), compare=False)


def blamed_later(config: BaseModel, loc: list[str], inside: bool = False) -> str | None:
    """What `validate` blames for the key at `loc` of a config it validated: the override that set it (with `inside`,
    one that set a key inside it too: `train.wandb.project=p` set `train.wandb`), else the file; None for a config
    that `validate` did not read (one read back from a run folder)."""
    given = getattr(config, GIVEN, None)
    return _blamed(list(given.overrides), loc, given.where, inside) if given and given.where is not None else None


def blamed_field(config: BaseModel, *keys: str) -> str:
    """'SOURCE: KEY: ' for a refusal made once the data is read about the fields `keys` (dotted): the first of them
    that an override set, else the first the file set (`blamed_later`); '' where none was set (a default or the
    data's) or `validate` did not read the config, so that the message alone names what to change."""
    given = getattr(config, GIVEN, None)
    found = [(key, source) for key in keys if _was_set(config, key.split("."))
             and (source := blamed_later(config, key.split("."), inside=True)) is not None]
    key, source = next(((k, s) for k, s in found if s != given.where), found[0]) if found else ("", "")
    return f"{source}: {key}: " if found else ""


def _was_set(config: BaseModel, loc: list[str]) -> bool:
    """Whether the key at `loc` was given (in the file or an override), not left to its default."""
    section = config
    for name in loc[:-1]:
        section = getattr(section, name, None)
    return isinstance(section, BaseModel) and (loc[-1] in section.model_fields_set
                                               or loc[-1] in (section.model_extra or {}))


def unknown_extras(model: type[BaseModel], data, loc: tuple[str, ...] = ()) -> list[list[str]]:
    """The key path of every key that a section taking keys beyond its fields (`extra="allow"` and a classmethod
    `extra_keys`: the model section, a preset's fields) does not take: pydantic lets any through, and they were
    refused only later, blamed on what read them (`model (preset 'tiny')`) rather than on the file or override."""
    if not isinstance(data, dict):
        return []
    extra = getattr(model, "extra_keys", None)
    found = [[*loc, key] for key in data if isinstance(key, str) and extra is not None
             and key not in model.model_fields and key not in extra()]
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is not None and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found += unknown_extras(field.annotation, value, (*loc, key))
    return found


def booleans_for_numbers(model: type[BaseModel], data, loc: tuple[str, ...] = ()) -> list[tuple[list[str], bool]]:
    """(key path, value) of every boolean given where `model` (or its `extra_keys`) takes a number: pydantic reads true
    as 1, so `train.global_batch: yes` would train on one sequence a step; sections, lists, mappings looked into."""
    if not isinstance(data, dict):
        return []
    fields = {**getattr(model, "extra_keys", dict)(), **model.model_fields}  # `model.hidden_size: true` too
    return [found for key, value in data.items() if isinstance(key, str) and key in fields
            for found in booleans_in(fields[key].annotation, value, [*loc, key])]


def booleans_in(annotation, value, loc: list[str]) -> list[tuple[list[str], bool]]:
    """`booleans_for_numbers` for one value of type `annotation` at `loc`."""
    kinds = annotation_kinds(annotation)
    if isinstance(value, bool):
        return [(loc, value)] if takes_number_not_bool(kinds) else []
    for kind in kinds:
        origin, args = get_origin(kind), get_args(kind)
        found: list = []
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found = booleans_for_numbers(kind, value, tuple(loc))
        elif origin in (list, tuple) and args and isinstance(value, (list, tuple)):  # tuple[float, float]: as one
            found = [f for i, item in enumerate(value) for f in booleans_in(args[0], item, [*loc, str(i)])]
        elif origin is dict and len(args) == 2 and isinstance(value, dict):
            found = [f for k, item in value.items() for f in booleans_in(args[1], item, [*loc, str(k)])]
        if found:
            return found
    return []


def takes_number_not_bool(kinds: list) -> bool:
    """Whether a value of these types is a number (or one of some words, `int | Literal["auto"]`), never a boolean."""
    words = [k for k in kinds if k not in (int, float)]
    return len(words) < len(kinds) and all(get_origin(k) is Literal and all(isinstance(a, str) for a in get_args(k))
                                           for k in words)


def annotation_kinds(annotation) -> list:
    """The types an annotation allows, None left out: `int | None` -> [int]; Annotated[int, Gt(0)] -> [int]."""
    if get_origin(annotation) is Annotated:
        return annotation_kinds(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [k for a in get_args(annotation) for k in annotation_kinds(a)]
    return [] if annotation is type(None) else [annotation]


def load_config(model: type[T], path: str | Path | None, overrides: list[str], default: str, *,
                shipped: str | None = None) -> T:
    """A config file (or `default` settings when there is none) with `--set` overrides, validated; `shipped`: the
    folder of the shipped configs of its kind, named by the refusal of a missing file (`load_yaml`)."""
    data = load_yaml(path, shipped=shipped) if path else {}
    return validate(model, apply_overrides(data, overrides), str(path or default), overrides)


def _problem(model: type[BaseModel], error: dict, where: str, overrides: list[str]) -> str:
    loc = [str(p) for p in error["loc"]]
    message = error["msg"].removeprefix("Value error, ")
    if not loc:  # a check across keys: its message names them; blame the override it names, else the file
        source = _named(overrides, message, where)
        return f"{source}: {message}{_set_values(overrides, loc, message) if source == where else ''}"
    key = ".".join(loc)
    if error["type"] == "extra_forbidden":
        return f"{_blamed(overrides, loc, where, unknown=True)}: {key}: unknown key{_unknown_hint(model, loc)}"
    source = _blamed(overrides, loc, where)
    given = error.get("input")
    # a message that already says `key=value` (a check across keys placed at the key set: the model section's), or a
    # check across a section's keys, whose message names them (the section's whole mapping would bury it)
    said = error["type"] == "missing" or isinstance(given, dict) or f"{loc[-1]}={given}" in message
    shown = "" if said else f" (got {given!r})"
    if source == where:
        return f"{source}: {key}: {message}{shown}{_set_values(overrides, loc, message)}"
    # the other keys set by override that such a message names: `--set model.hidden_size=250` blamed, and heads too
    others = _set_values([o for o in overrides if _shown(o) != source], loc[:-1], message, assigned=True)
    return f"{source}: {key}: {message}{shown}{others}"


def _set_values(overrides: list[str], loc: list[str], message: str, assigned: bool = False) -> str:
    """A check across the keys of a section, blamed on the file, whose message names a key that an override set:
    ' (train.global_batch=4 from --set)', or from the file and key that set it (`_shown`), so that the value is not
    taken for the file's; else ''. `assigned`: only a key named with its value (`num_attention_heads=3`)."""
    section = "".join(f"{part}." for part in loc)
    end = "=" if assigned else r"(?![\w])"
    named = {}
    for override in overrides:  # the last one given for a key wins, as in apply_overrides
        key = _override_key(override)
        leaf = key.removeprefix(section) if key.startswith(section) else None
        if (leaf and re.search(rf"(?<![\w.]){re.escape(leaf)}{end}", message)) or re.search(
                rf"(?<![\w.]){re.escape(key)}{end}", message):
            named[key] = (f"{key}={override.partition('=')[2].strip()}", getattr(override, "source", None))
    by_origin: dict[str, list[str]] = {}
    for text, origin in named.values():
        by_origin.setdefault(origin or option_name("set"), []).append(text)
    return f" ({'; '.join(', '.join(t) + f' from {o}' for o, t in by_origin.items())})" if named else ""


def _unknown_hint(model: type[BaseModel], loc: list[str]) -> str:
    """What an unknown key's section takes, the closest name first when one is close (a typo: `trian`, `stpes`):
    " (did you mean 'train.steps'?; allowed in train: ...)"; '' where the section is no model's (a free mapping)."""
    allowed = _allowed_keys(model, loc[:-1])
    if not allowed:
        return ""
    # a key of exactly one section of this one (`lr` -> `optim.lr`), else a close name here (`trian` -> `train`)
    inside = [section for section in allowed if loc[-1] in _allowed_keys(model, [*loc[:-1], section])]
    close = inside if len(inside) == 1 else difflib.get_close_matches(loc[-1], allowed, n=1)
    guess = f"did you mean {'.'.join([*loc[:-1], close[0], *loc[-1:] * (len(inside) == 1)])!r}?; " if close else ""
    return f" ({guess}allowed{' in ' + '.'.join(loc[:-1]) if loc[:-1] else ''}: {', '.join(allowed)})"


def _blamed(overrides: list[str], loc: list[str], where: str, unknown: bool = False) -> str:
    """The override that set the bad key: the most specific one, the last given (it wins); else the file. An
    `unknown` key is also one that an override made by naming a key inside it: `--set trian.steps=20` made `trian`."""
    inside = ".".join(loc) + "."
    matching = [o for o in overrides if _override_key(o) in _prefixes(loc)
                or (unknown and _override_key(o).startswith(inside))]
    return _shown(max(reversed(matching), key=lambda o: len(_override_key(o)))) if matching else where


def _shown(override: str) -> str:
    """An override as a refusal names it: `--set k=v`, or the file and key that set it (study/grid.py `StudySet`)."""
    return getattr(override, "source", None) or option("set", override)


def _named(overrides: list[str], message: str, where: str) -> str:
    """The override a message about several keys is about: the one whose key (or the longest start of it) the
    message begins with, else one whose key it names; else the file."""
    def score(override: str) -> int:
        parts = _override_key(override).split(".")
        starts = [n for n in range(len(parts), 0, -1) if message.startswith(".".join(parts[:n]))]
        return 100 * starts[0] if starts else int(".".join(parts) in message)
    best = max(reversed(overrides), key=score, default=None)
    return _shown(best) if best is not None and score(best) else where


def _override_key(override: str) -> str:
    return override.partition("=")[0].strip().removesuffix("!").strip()


def _prefixes(loc: list[str]) -> set[str]:
    return {".".join(loc[:n]) for n in range(1, len(loc) + 1)}


def _allowed_keys(model: type[BaseModel], path: list[str]) -> list[str]:
    """The keys a section takes (its `extra_keys` too: `unknown_extras`), following the model's nested sections;
    none when the path leaves them."""
    for part in path:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    extra = getattr(model, "extra_keys", None)
    return sorted({*model.model_fields, *(extra() if extra else ())})
