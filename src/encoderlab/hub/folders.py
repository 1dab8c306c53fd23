"""What import (importer.py) and export (exporter.py) share: output folders and the unsupported-model error."""
from __future__ import annotations

from pathlib import Path

from encoderlab.errors import EncoderlabError


class UnsupportedModelError(EncoderlabError):
    """A model whose architecture encoderlab cannot represent exactly."""


def prepare_out(out: Path, force: bool, keep: Path) -> None:
    """Refuse to replace a non-empty folder unless asked (the output is written whole, then renamed over it), and
    never one holding `keep`, the input."""
    if keep.resolve().is_relative_to(out.resolve()):
        raise EncoderlabError(f"--out {out} holds the input {keep}: writing there would replace it")
    if out.exists() and not out.is_dir():
        raise EncoderlabError(f"--out {out} is a file; give a folder path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise EncoderlabError(f"--out {out} exists and is not empty: pass --force to replace it")
