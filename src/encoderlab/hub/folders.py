"""What import (importer.py) and export (exporter.py) share: output folders and weights-only checkpoints."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from encoderlab.io import atomic_dir, write_json
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.errors import EncoderlabError
from encoderlab.model.config import ModelConfig
from encoderlab.train.checkpoint import safetensors_weights


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


def save_weights_only(dest: Path, weights: dict[str, torch.Tensor], cfg: ModelConfig, tokenizer: TextTokenizer,
                      state: dict, extra_json: dict[str, dict] | None = None) -> Path:
    """A checkpoint folder as train/checkpoint.py writes one, without optimizer.pt: `checkpoint.load_model` and
    `init.from_weights` read it. Written to a temporary sibling and renamed when complete."""
    with atomic_dir(dest) as tmp:
        save_file(safetensors_weights(weights), str(tmp / "model.safetensors"),
                  metadata={"format": "pt", "step": str(state.get("step", 0))})
        write_json(tmp / "model_config.json", cfg.model_dump())
        tokenizer.save(tmp / "tokenizer")
        for name, obj in (extra_json or {}).items():
            write_json(tmp / name, obj)
        write_json(tmp / "state.json", {**state, "step": state.get("step", 0)})
    return dest
