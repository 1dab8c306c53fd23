"""The checkpoint format, one for every world size: what a checkpoint folder holds and how its parts are read.

`checkpoints/step-NNNNNNN/` holds `dcp/` (the AdamW state in `torch.distributed.checkpoint` format, keyed by
parameter name: written and read by pretraining/distributed.py, whatever wraps the model and however many processes
write or read it; the weights are stored once, below), the consolidated `model.safetensors` (Hugging Face parameter
names, read by resume too), `model_config.json`, `tokenizer/` and `state.json` (step, phase, LR schedule position,
data position, why it was written). Fine-tuning, export and `init.from_weights` read only the last four, so a
weights-only checkpoint (an import) is the same folder without `dcp/`. No RNG state is needed: the only randomness
after initialisation is MLM masking (and mixes of objectives), whose generators are seeded from
`derive_seed(stream, seed, step)`, so a resumed run draws exactly what an uninterrupted one would.

Every writer ends with `checksums.json`, the size and SHA-256 of every other file (relative paths), written last
inside the temporary folder; `state.json` says a manifest was written, so deleting it is caught too. Readers verify
what they read before using it (fine-tuning, export, `init.from_weights`: the weights, config and tokenizer; resume:
the whole folder) and refuse a damaged, truncated or missing file in one line naming it and the newest older
complete checkpoint of the run, if any.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from encoderlab.core.errors import EncoderlabError, command, given_as, resolved
from encoderlab.core.io import atomic_dir, atomic_file, file_digest, sha256_of, write_json
from encoderlab.core.leftovers import remove_leftovers
from encoderlab.runs import migrate_checkpoint

if TYPE_CHECKING:
    from encoderlab.data.tokenizer import TextTokenizer

LATEST = "LATEST"
WEIGHTS = "model.safetensors"
MANIFEST = "checksums.json"
TRANSFORMERS_CONFIG = "config.json"  # in place of model_config.json: a transformers model continued by pretraining
STEP_NAME = re.compile(r"step-\d{7,}")  # checkpoint_name's: the only names LATEST may hold


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


def write_folder(folder: Path, step: int, weights: dict[str, torch.Tensor], config, tokenizer: Path | TextTokenizer,
                 state: dict, extra_json: dict[str, dict] | None = None) -> None:
    """Everything of a checkpoint but `dcp/`: weights, model config, tokenizer (a folder to copy, or one to save),
    any `extra_json` files and `state.json`. Into `folder`, which the caller renames into place when complete."""
    # One metadata key: safetensors writes its metadata map in a random (Rust HashMap) order, so with two keys the
    # same weights would give different file bytes from one write to the next.
    save_file(safetensors_weights(weights), str(folder / WEIGHTS), metadata={"format": "pt"})
    if hasattr(config, "hf_config"):  # a transformers model's (TransformersConfig): its config.json, as it came
        write_json(folder / TRANSFORMERS_CONFIG, config.config)
    else:
        write_json(folder / "model_config.json", config.model_dump())
    if isinstance(tokenizer, Path):
        shutil.copytree(tokenizer, folder / "tokenizer")
    else:
        tokenizer.save(folder / "tokenizer")
    for name, obj in (extra_json or {}).items():
        write_json(folder / name, obj)
    write_json(folder / "state.json", {**state, "step": step, "manifest": MANIFEST,
                                       "format_version": migrate_checkpoint.FORMAT})


def save_weights_only(dest: Path, weights: dict[str, torch.Tensor], config, tokenizer: Path | TextTokenizer,
                      state: dict, extra_json: dict[str, dict] | None = None) -> Path:
    """A checkpoint without training state (an import, a random initialisation): `load_model` and
    `init.from_weights` read it, resuming refuses it. Written to a temporary sibling and renamed when complete."""
    with atomic_dir(dest) as tmp:
        write_folder(tmp, state.get("step", 0), weights, config, tokenizer, state, extra_json)
        write_manifest(tmp)
    return dest


def write_manifest(folder: Path) -> None:
    """The size and SHA-256 of every file under `folder` into its `checksums.json`: the writer's last file."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / MANIFEST)
    write_json(folder / MANIFEST, {"files": {p.relative_to(folder).as_posix(): {
        "size": p.stat().st_size, "sha256": sha256_of(p)} for p in files}})


# What every checkpoint writer writes and its manifest must list: one missing from the manifest means the manifest
# was cut short (an emptied one verified nothing). Other files beside them (a desktop's .DS_Store, an export into a
# subfolder) are not the checkpoint's and are left alone.
ALWAYS_WRITTEN = (WEIGHTS, "state.json", "model_config.json", "tokenizer/tokenizer.json", "dcp/.metadata")


def verify(path: Path, names: tuple[str, ...] | None = None, skip: tuple[str, ...] = (), hashes: bool = True) -> None:
    """Refuse, in one line naming the file, a file of checkpoint `path` that is missing or whose size or SHA-256
    differs from the manifest: every file (`names` None) or those named (a folder covers its files), less `skip`;
    `hashes` False: sizes only (the cheap check)."""
    files = _manifest(path)
    if files is None:
        return  # written before checksums existed (older runs and imports): accepted as they are, unverified

    def wanted(rel: str) -> bool:
        return rel not in skip and (names is None or any(rel == n or rel.startswith(n + "/") for n in names))

    if unlisted := [rel for rel in ALWAYS_WRITTEN if wanted(rel) and rel not in files and (path / rel).is_file()]:
        raise EncoderlabError(f"checkpoint file {path / unlisted[0]} is not in {MANIFEST}, which lists every file "
                              f"its writer wrote: the manifest is damaged{older_hint(path)}")
    for rel, entry in files.items():
        if not wanted(rel):
            continue
        problem = _problem(path / rel, entry) or ("" if not hashes or sha256_of(path / rel) == entry["sha256"] else
                                                  f"does not match its SHA-256 in {MANIFEST}: its bytes are damaged")
        if problem:
            raise EncoderlabError(f"checkpoint file {path / rel} {problem}{older_hint(path)}")


def weights_digest(path: Path) -> str:
    """The SHA-256 of a checkpoint's `model.safetensors`: what a result made from it is filed under
    (finetuning/records.py), so that the same weights in any folder are one model and other weights never are. The
    manifest's entry (checked against the file wherever the weights are read); a checkpoint from before manifests
    is hashed, once per process and file version."""
    files = _manifest(path)
    if files is not None and WEIGHTS in files:
        return files[WEIGHTS]["sha256"]
    return file_digest(path / WEIGHTS)


def _manifest(path: Path) -> dict[str, dict] | None:
    """{relative path: {size, sha256}}, or None for a checkpoint written before manifests."""
    if not (path / MANIFEST).exists():
        if _written_before_manifests(path):
            return None
        raise EncoderlabError(f"checkpoint file {path / MANIFEST} is missing (its writer wrote one){older_hint(path)}")
    try:
        return _listed(path)
    except ValueError:
        raise EncoderlabError(f"checkpoint file {path / MANIFEST} is damaged: not the list of checksums its writer "
                              f"wrote{older_hint(path)}") from None


def _written_before_manifests(path: Path) -> bool:
    """Whether the checkpoint's state says it was written before checksums existed (no manifest to check)."""
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, ValueError):
        return False  # no readable state to say so: refuse rather than trust
    return isinstance(state, dict) and migrate_checkpoint.upgrade_state(state, path / "state.json")["manifest"] is None


def _listed(path: Path) -> dict[str, dict]:
    """The manifest's entries; ValueError when it does not read as one. Its writer lists files below the checkpoint
    only: an absolute path or a `..` would have the checks read files elsewhere."""
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        if all(isinstance(e["size"], int) and isinstance(e["sha256"], str) and _below(rel) for rel, e in files.items()):
            return files
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    raise ValueError(path / MANIFEST)


def _below(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not rel.startswith(("/", "\\")) and ".." not in parts and ":" not in parts[0]


def _problem(file: Path, entry: dict) -> str:
    """What is wrong with `file` that its size shows ('' when nothing): the cheap check, before hashing."""
    if not file.is_file():
        return f"is missing ({MANIFEST} lists it)"
    size = file.stat().st_size
    return f"has {size} bytes, {MANIFEST} records {entry['size']}" if size != entry["size"] else ""


def older_hint(path: Path) -> str:
    """'; <the newest older complete checkpoint of the run> ...' or '' when there is none."""
    if path.parent.name != "checkpoints":
        return ""
    for older in sorted(path.parent.glob("step-*"), reverse=True):
        if older.name < path.name and _complete(older):
            return (f"; {older} is an older complete checkpoint of this run (to resume from it, write "
                    f"{older.name} into {path.parent.parent / LATEST})")
    return ""


def _complete(path: Path) -> bool:
    """A manifest that reads, and every file it lists present at its size (no hashing: this only names it)."""
    try:
        files = _listed(path)
    except ValueError:
        return False
    return (path / "state.json").exists() and not any(_problem(path / rel, entry) for rel, entry in files.items())


def set_latest(run_dir: Path, dest: Path) -> None:
    with atomic_file(run_dir / LATEST) as pointer:  # the pointer moves only once the folder is complete
        pointer.write_text(dest.name + "\n")


def latest(run_dir: Path) -> Path | None:
    """The checkpoint LATEST names; None without a LATEST (none written yet, or it was lost: `newest_complete` finds
    what is there). Anything else is refused, never guessed: a run must not silently resume elsewhere than where
    its pointer says, and a name such as ../../x must never lead outside the run's checkpoints."""
    pointer = run_dir / LATEST
    if not pointer.exists():
        return None
    newest = run_dir / "checkpoints" / "step-~"  # every step-N sorts before it: the hint names the newest complete
    if not pointer.is_file():
        raise EncoderlabError(f"{pointer} is not a file: it should name this run's latest checkpoint"
                              f"{older_hint(newest)}")
    name = pointer.read_text(errors="replace").strip()
    if not STEP_NAME.fullmatch(name):
        raise EncoderlabError(f"{pointer} names {ascii(name[:80])}, which is not a checkpoint of this run (a "
                              f"step-NNNNNNN folder in {run_dir / 'checkpoints'}){older_hint(newest)}")
    path = run_dir / "checkpoints" / name
    if not (path / "state.json").exists():
        raise EncoderlabError(f"{pointer} names {path.name}, which is missing or incomplete (no state.json)"
                              f"{older_hint(path)}")
    return path


def newest_complete(run_dir: Path) -> Path | None:
    """The newest complete step folder of a run, whatever LATEST says (None: none)."""
    found = sorted((p for p in (run_dir / "checkpoints").glob("step-*") if STEP_NAME.fullmatch(p.name)), reverse=True)
    return next((p for p in found if _complete(p)), None)


def load_state(path: Path) -> dict:
    """The checkpoint's state.json, verified, in the current format (runs/migrate_checkpoint.py)."""
    verify(path, ("state.json",))
    state = migrate_checkpoint.upgrade_state(json.loads((path / "state.json").read_text()), path / "state.json")
    migrate_checkpoint.check_position(state, path / "state.json")
    return state


def resolve(path: str | Path) -> Path:
    """A checkpoint folder, or a run folder (its LATEST checkpoint)."""
    path = Path(path)
    if (path / "state.json").exists():
        return path
    if (path / LATEST).exists():
        found = latest(path)
        assert found is not None
        return found
    raise EncoderlabError(f"{given_as(path)}{resolved(path)} is neither a checkpoint folder"
                          f" (with state.json) nor a run folder (with {LATEST})")


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
    with safe_open(str(path / WEIGHTS), "pt") as f:
        names = f.keys()  # a safe_open handle is not iterable itself
        shapes = {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in names}  # no data read
    problems = weight_mismatches(shapes, expected)
    if problems:
        raise EncoderlabError(f"checkpoint {path} does not fit the configured model: {problems}")


def refuse_non_finite(weights, where: Path | str) -> None:
    """Refuse weights holding a NaN or an infinity, naming the first such tensor: one reaches every output, so a
    fine-tuning run would fail as if its LR were too high and a pretraining run stop as diverged. One pass of
    `isfinite` per tensor, a fraction of a forward pass, wherever weights are read from files."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise EncoderlabError(f"{where}: weight {name} is not finite (it holds NaN or infinite values): the "
                                  "model is damaged or diverged; give weights that are all finite numbers")


def read_weights(path: Path, expected: dict) -> dict[str, torch.Tensor]:
    """The checkpoint's full weights, once verified, checked against `expected` (a state dict, possibly of sharded
    tensors) and finite."""
    verify(path, (WEIGHTS,))
    check_weights_fit(path, expected)
    weights = load_file(str(path / WEIGHTS))
    refuse_non_finite(weights, path)
    return weights


def load_weights(path: Path, model: torch.nn.Module) -> None:
    """Load weights, refusing with a readable list any name or shape that does not fit the model."""
    model.load_state_dict(read_weights(path, model.state_dict()))


def load_model(path: str | Path):
    """(TransformerLM on CPU in fp32, ModelConfig, TextTokenizer) from a checkpoint or run folder."""
    from encoderlab.data.tokenizer import load_tokenizer
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM

    path = resolve(path)
    if (path / TRANSFORMERS_CONFIG).is_file():
        export = command("encoderlab export --as masked-lm", "encoderlab.export(CKPT, OUT, kind='masked-lm')")
        raise EncoderlabError(f"{path} holds a continued transformers model (config.json): fine-tune or evaluate it "
                              f"as it is (sweep, study) or export it ({export})")
    verify(path, ("model_config.json", "tokenizer"))  # and the weights, as load_weights reads them
    if not (path / "model_config.json").exists() or not (path / "tokenizer").exists():
        raise EncoderlabError(f"{path} lacks model_config.json or tokenizer/: it was written by an older encoderlab")
    cfg = ModelConfig.model_validate(json.loads((path / "model_config.json").read_text()))
    tokenizer = load_tokenizer(path / "tokenizer")
    if tokenizer.vocab_size > cfg.vocab_size:
        # its ids past the embeddings would fail deep in a fine-tuning run, or export a model that cannot read them
        raise EncoderlabError(f"{path}: its tokenizer has {tokenizer.vocab_size} tokens but its model's vocab_size is "
                              f"{cfg.vocab_size} (model_config.json): the model cannot read ids from "
                              f"{cfg.vocab_size} up; pair the model with the tokenizer it was trained with")
    model = TransformerLM(cfg)
    load_weights(path, model)
    return model, cfg, tokenizer


def prune(run_dir: Path, keep: int) -> None:
    """Delete the oldest periodic checkpoints beyond `keep`; phase, stable and final ones stay. A folder is first
    renamed out of the `step-*` names (atomic), so a kill mid-deletion leaves a dot-folder `clean_stale` removes,
    never a step folder without its state."""
    folder = run_dir / "checkpoints"
    periodic = sorted(p for p in folder.glob("step-*")
                      if (p / "state.json").exists() and _reason(p) == "periodic")
    current = latest(run_dir)
    for path in periodic[:-keep]:
        if path != current:
            doomed = path.with_name(f".{path.name}.deleting-{os.getpid()}")
            os.replace(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)


def _reason(path: Path) -> str | None:
    # Unverified: a damaged old checkpoint must not stop the run that prunes it.
    try:
        return json.loads((path / "state.json").read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        return None


def clean_stale(run_dir: Path) -> list[str]:
    """Remove what killed writes and prunes leave: in `checkpoints/`, temporary, replaced and half-deleted folders
    (dot-names) and step folders without state.json (a complete checkpoint always has one, so they are never
    LATEST); in the run folder, the temporary files of atomic writes (`.LATEST.tmp-<pid>`...). Call with the run's
    lock held, before anything writes there; returns the names removed."""
    folder = run_dir / "checkpoints"
    stale = [p for p in (folder.iterdir() if folder.exists() else []) if p.is_dir() and (
        p.name.startswith(".") or (p.name.startswith("step-") and not (p / "state.json").exists()))]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return sorted([p.name for p in stale] + remove_leftovers(run_dir))
