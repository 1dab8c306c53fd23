"""Models that exist already, in a study: `checkpoints: {NAME: PATH}`, evaluated like the study's own, never trained.

PATH is a checkpoint folder, a run folder (its latest checkpoint, fixed when the study is planned) or anything
`encoderlab import-hf` reads (a transformers folder, a .gguf file), which `study run` imports once into
STUDY/checkpoints/NAME before any job starts. Every path is checked when the study is planned, so a wrong one is
one line before any work. Their records are those of their weights (the digest in every record): a checkpoint
whose weights change is evaluated again.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from encoderlab.core.config import ConfigError
from encoderlab.core.errors import EncoderlabError
from encoderlab.runs.checkpoint import LATEST
from encoderlab.study.spec import StudySpec, resolve_path


def import_dir(root: Path, name: str) -> Path:
    return root / "checkpoints" / name


def _needs_import(path: Path) -> bool:
    """A transformers folder or a GGUF file: not a native checkpoint or run folder."""
    if path.is_file():
        return path.suffix == ".gguf"
    return (path / "config.json").exists() and not (path / "state.json").exists() and not (path / LATEST).exists()


def locate(spec: StudySpec, base_dir: Path, root: Path) -> dict[str, Path]:
    """NAME -> the checkpoint folder its evaluations read (an import's, for a transformers folder or GGUF file).
    Raises one ConfigError naming the entry, the path and what is allowed, before anything runs."""
    from encoderlab.runs.checkpoint import resolve

    out = {}
    for name, given in spec.checkpoints.items():
        path = resolve_path(base_dir, given).expanduser()
        where = f"study {spec.name}: checkpoints.{name}: {given!r}"
        if not path.exists():
            raise ConfigError(f"{where} not found (looked for {path}); give a checkpoint folder (with state.json), a "
                              "run folder (with LATEST), a transformers folder (with config.json) or a .gguf file")
        if _needs_import(path):
            out[name] = import_dir(root, name)
            continue
        try:
            out[name] = resolve(path).resolve()
        except EncoderlabError:
            raise ConfigError(f"{where} ({path}) is not a model: give a checkpoint folder (with state.json), a run "
                              "folder (with LATEST), a transformers folder (with config.json) or a .gguf "
                              "file") from None
    return out


def import_checkpoints(spec: StudySpec, base_dir: Path, root: Path, log: Callable[[str], None] = print) -> None:
    """Import every transformers folder or GGUF file of `checkpoints` not yet imported (written whole, renamed)."""
    from encoderlab.hub.importer import import_hf

    for name, given in spec.checkpoints.items():
        path = resolve_path(base_dir, given).expanduser()
        out = import_dir(root, name)
        if _needs_import(path) and not (out / "state.json").exists():
            log(f"importing checkpoint {name} from {path}")
            import_hf(str(path), out, log=log)
