"""Typed configuration: YAML files, dotted overrides, and errors that name the key, the value and what is allowed."""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from encoderlab.errors import EncoderlabError

T = TypeVar("T", bound=BaseModel)


class ConfigError(EncoderlabError):
    """A configuration file or override is invalid."""


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Load a YAML mapping; a top-level `base: other.yaml` (relative to this file) is loaded first and this file's
    keys are merged over it, section by section."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if path.resolve() in _seen:
        raise ConfigError(f"config {path} includes itself through 'base'")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections at the top level, not {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    return deep_merge(load_yaml(path.parent / base, (*_seen, path.resolve())), data)


def deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """`["train.lr=3e-4", "objective=clm"]` -> nested updates; values are parsed as YAML scalars/lists."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like section.key=value")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is a value, not a section")
            node = child
        node[parts[-1]] = _parse_value(raw)
    return data


def _parse_value(raw: str):
    value = yaml.safe_load(raw) if raw.strip() else None
    if isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "3e-4" as a string; users mean a number
        except ValueError:
            pass
    return value


def validate(model: type[T], data: dict[str, Any], where: str) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            message = "unknown key" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
            if not e["loc"]:  # a check across keys: its message names them, and the input is the whole file
                lines.append(message)
                continue
            shown = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {e.get('input')!r})"
            lines.append(f"{'.'.join(str(p) for p in e['loc'])}: {message}{shown}")
        raise ConfigError(f"invalid configuration in {where}:\n  " + "\n  ".join(lines)) from None
