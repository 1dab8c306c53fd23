"""What import (importer.py) and export (exporter.py) share: output folders and the unsupported-model error."""
from __future__ import annotations

from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import check_writable


class UnsupportedModelError(EncoderlabError):
    """A model whose architecture encoderlab cannot represent exactly."""


def prepare_out(out: Path, force: bool, keep: Path) -> None:
    """Refuse, before any work, a folder that cannot be written or would replace what it should not: a non-empty
    one unless asked (the output is written whole beside it, then renamed over it), never one holding `keep`, the
    input."""
    if keep.resolve().is_relative_to(out.resolve()):
        raise EncoderlabError(f"--out {out} holds the input {keep}: writing there would replace it")
    check_writable(out, "--out", replaced=True)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise EncoderlabError(f"--out {out} exists and is not empty: pass --force to replace it")
