"""Full-state checkpoints, written to a temporary folder and renamed when complete.

A checkpoint folder holds `model.safetensors` (Hugging Face parameter names), `optimizer.pt` (AdamW state, loaded
with `weights_only=True`) and `state.json` (step, phase, LR schedule position, data position, why it was written).
An FSDP2 run writes its model and optimizer shards in `dcp/` instead of `optimizer.pt` (see train/distributed.py,
which reads and writes both formats); `model.safetensors` is always there, consolidated.
No RNG state is needed: the only randomness after initialisation is MLM masking, whose generator is seeded from
(seed, step), so a resumed run draws exactly the masks an uninterrupted one would.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from encoderlab.io import atomic_dir, write_json
from encoderlab.errors import EncoderlabError

LATEST = "LATEST"


def checkpoint_name(step: int) -> str:
    return f"step-{step:07d}"


def safetensors_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors that share no memory: safetensors refuses a tied head sharing the embedding's
    storage, while `checkpoint.load_weights` expects both names, so each shared tensor is written as its own copy."""
    seen: set[int] = set()
    out = {}
    for name, tensor in weights.items():
        t = tensor.detach().cpu().contiguous()
        key = t.untyped_storage().data_ptr()
        out[name] = t.clone() if key in seen else t
        seen.add(key)
    return out


def save(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
         *, tokenizer_dir: Path | None = None) -> Path:
    """Write a checkpoint that stands alone: weights, model config and tokenizer travel with it (fine-tuning and
    export need nothing else), plus the optimizer and loop state that resuming needs."""
    dest = run_dir / "checkpoints" / checkpoint_name(step)
    with atomic_dir(dest) as tmp:
        write_weights(tmp, step, model.state_dict(), getattr(model, "config", None), tokenizer_dir)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        write_json(tmp / "state.json", {**state, "step": step})
    set_latest(run_dir, dest)
    return dest


def write_weights(folder: Path, step: int, weights: dict[str, torch.Tensor], config, tokenizer_dir: Path | None
                  ) -> None:
    """What fine-tuning, export and `init.from_weights` read: weights, model config and tokenizer."""
    save_file(safetensors_weights(weights), str(folder / "model.safetensors"),
              metadata={"format": "pt", "step": str(step)})
    if config is not None:
        write_json(folder / "model_config.json", config.model_dump())
    if tokenizer_dir is not None:
        shutil.copytree(tokenizer_dir, folder / "tokenizer")


def set_latest(run_dir: Path, dest: Path) -> None:
    pointer = run_dir / f".{LATEST}.tmp"
    pointer.write_text(dest.name + "\n")
    os.replace(pointer, run_dir / LATEST)  # the pointer moves only once the folder is complete


def latest(run_dir: Path) -> Path | None:
    pointer = run_dir / LATEST
    if not pointer.exists():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    if not (path / "state.json").exists():
        raise EncoderlabError(f"{pointer} names {path.name}, which is missing or incomplete")
    return path


def load_state(path: Path) -> dict:
    return json.loads((path / "state.json").read_text())


def resolve(path: str | Path) -> Path:
    """A checkpoint folder, or a run folder (its LATEST checkpoint)."""
    path = Path(path)
    if (path / "state.json").exists():
        return path
    if (path / LATEST).exists():
        found = latest(path)
        assert found is not None
        return found
    raise EncoderlabError(f"{path} is neither a checkpoint folder (with state.json) nor a run folder (with {LATEST})")


def weight_mismatches(weights: dict, expected: dict, source: str = "checkpoint", target: str = "model") -> str:
    """'' when names and shapes agree, else the first five differences, readable."""
    problems = [f"missing {k}" for k in expected if k not in weights]
    problems += [f"unexpected {k}" for k in weights if k not in expected]
    problems += [f"{k}: {source} {tuple(weights[k].shape)} vs {target} {tuple(v.shape)}"
                 for k, v in expected.items() if k in weights and weights[k].shape != v.shape]
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return "; ".join(problems[:5]) + more if problems else ""


def check_weights_fit(path: Path, expected: dict) -> None:
    """Refuse, with a readable list, any name or shape of the checkpoint's weights that does not fit `expected`
    (a state dict); reads only the safetensors header."""
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        names = f.keys()  # a safe_open handle is not iterable itself
        shapes = {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in names}  # no data read
    problems = weight_mismatches(shapes, expected)
    if problems:
        raise EncoderlabError(f"checkpoint {path} does not fit the configured model: {problems}")


def read_weights(path: Path, expected: dict) -> dict[str, torch.Tensor]:
    """The checkpoint's full weights, once checked against `expected` (a state dict, possibly of sharded tensors)."""
    check_weights_fit(path, expected)
    return load_file(str(path / "model.safetensors"))


def load_weights(path: Path, model: torch.nn.Module) -> None:
    """Load weights, refusing with a readable list any name or shape that does not fit the model."""
    model.load_state_dict(read_weights(path, model.state_dict()))


def load_model(path: str | Path):
    """(TransformerLM on CPU in fp32, ModelConfig, TextTokenizer) from a checkpoint or run folder."""
    from encoderlab.data.tokenizer import load_tokenizer
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM

    path = resolve(path)
    if not (path / "model_config.json").exists() or not (path / "tokenizer").exists():
        raise EncoderlabError(f"{path} lacks model_config.json or tokenizer/: it was written by an older encoderlab")
    cfg = ModelConfig.model_validate(json.loads((path / "model_config.json").read_text()))
    model = TransformerLM(cfg)
    load_weights(path, model)
    return model, cfg, load_tokenizer(path / "tokenizer")


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))


def prune(run_dir: Path, keep: int) -> None:
    """Delete the oldest periodic checkpoints beyond `keep`; phase, stable and final ones stay."""
    folder = run_dir / "checkpoints"
    periodic = sorted(p for p in folder.glob("step-*") if load_state(p).get("reason") == "periodic")
    current = latest(run_dir)
    for path in periodic[:-keep]:
        if path != current:
            shutil.rmtree(path, ignore_errors=True)
