"""The refusal of a config file that holds no setting, shared by the kinds of config that would otherwise read it
as no keys: a protocol (every key has a default, so it would run settings no one chose) and a pretraining config
(refused as missing `train`, which says nothing of the file)."""
from __future__ import annotations

from pathlib import Path

import yaml

from encoderlab.core.config import ConfigError, read_yaml


def refuse_empty(path: str | Path, kind: str, instead: str) -> None:
    """Refuse `path` when it holds no setting (saved before it was written, or cut short: nothing, blank lines,
    comments, a bare `---` or `{}`), as `{kind} {path} is empty: it holds no setting; {instead}`."""
    path = Path(path)
    try:
        empty = path.is_file() and read_yaml(path.read_text(encoding="utf-8")) in (None, {})  # `{}`: no setting either
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return  # load_yaml says what is wrong with it
    if empty:
        raise ConfigError(f"{kind} {path} is empty: it holds no setting; {instead}")
