"""Reading a checkpoint's optimizer state (`dcp/`, torch.distributed.checkpoint's format) without running anything
the checkpoint holds.

DCP's own reader unpickles `dcp/.metadata` with plain `pickle`, and its planner loads every value that is not a
tensor (AdamW's param_groups) with `torch.load(weights_only=False)`: a checkpoint received from someone else, its
`checksums.json` redone, could run code when resumed or branched from. Here `.metadata` is unpickled by an
unpickler that builds only what DCP writes there (its metadata dataclasses, torch sizes, dtypes and layouts, paths)
and refuses anything else in one line naming the file; the values are loaded with `weights_only=True`; and the data
files `.metadata` names must lie in `dcp/` itself. Tensors DCP already reads with `weights_only=True`.
"""
from __future__ import annotations

import dataclasses
import enum
import io
import pickle
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from encoderlab.core.errors import EncoderlabError
from encoderlab.runs.checkpoint import older_hint

METADATA_MODULE = "torch.distributed.checkpoint.metadata"
# Besides METADATA_MODULE's dataclasses and enums and torch's dtypes, layouts and memory formats: what DCP pickles.
ALLOWED = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("torch.distributed.checkpoint.filesystem",
           "_StorageInfo"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("collections", "OrderedDict"),
           ("builtins", "set"), ("builtins", "frozenset")}
REFUSAL = "encoderlab loads no code from a checkpoint: resume or branch only from checkpoints written by encoderlab"


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file, path: Path):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED or _allowed_by_kind(module, name):
            return super().find_class(module, name)
        raise EncoderlabError(f"checkpoint file {self.path} asks to build {module}.{name}, which an optimizer state "
                              f"never holds: {REFUSAL}")


def _allowed_by_kind(module: str, name: str) -> bool:
    """DCP's metadata dataclasses and enums (whatever torch version wrote them), and torch's dtype-like constants."""
    if module == METADATA_MODULE:
        import torch.distributed.checkpoint.metadata as metadata

        obj = getattr(metadata, name, None)
        return isinstance(obj, type) and (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum))
    if module == "torch":
        return isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format))
    return False


def read_metadata(path: Path) -> Metadata:
    """The Metadata of `path` (a `.metadata` file), built by the restricted unpickler."""
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f, path).load()
    except EncoderlabError:
        raise
    except Exception as exc:  # a pickle cut short or not one: one line naming the file
        raise EncoderlabError(f"checkpoint file {path} is damaged: not the optimizer index DCP writes "
                              f"({type(exc).__name__})") from None
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(metadata, Metadata) or not isinstance(storage, dict):
        raise EncoderlabError(f"checkpoint file {path} is damaged: not the optimizer index DCP writes")
    for info in storage.values():
        rel = getattr(info, "relative_path", None)
        if not (isinstance(info, _StorageInfo) and isinstance(rel, str) and Path(rel).name == rel not in ("", "..")):
            raise EncoderlabError(f"checkpoint file {path} names {ascii(rel)[:80]} as a data file: the optimizer "
                                  f"state's files are in {path.parent} itself; {REFUSAL}")
    return metadata


class _SafeReader(FileSystemReader):
    """DCP's file reader, with `.metadata` read (and checked) before DCP starts."""

    def __init__(self, folder: Path):
        super().__init__(folder)
        self.folder = folder
        self.metadata = read_metadata(folder / ".metadata")

    def read_metadata(self, *args, **kwargs) -> Metadata:
        self.metadata.storage_meta = self.metadata.storage_meta or StorageMeta()
        self.metadata.storage_meta.load_id = self.load_id
        return self.metadata


class _SafePlanner(DefaultLoadPlanner):
    """DCP's default planner, loading the values that are not tensors as plain data only."""

    def __init__(self, reader: _SafeReader):
        super().__init__()
        self.reader = reader

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError:
            file = self.reader.folder / self.reader.storage_data[read_item.storage_index].relative_path
            raise EncoderlabError(f"checkpoint file {file} holds {read_item.dest_index.fqn} as a pickle that is not "
                                  f"plain data: {REFUSAL}") from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def load(state: dict, folder: Path) -> None:
    """`dcp.load(state, checkpoint_id=folder)`, running nothing from `folder`; a refusal is one EncoderlabError
    (DCP wraps what its reader raises into a CheckpointException, which is unwrapped here)."""
    reader = _SafeReader(folder)
    try:
        dcp.load(state, storage_reader=reader, planner=_SafePlanner(reader))
    except CheckpointException as exc:
        refusal = next((e for e, _ in exc.failures.values() if isinstance(e, EncoderlabError)), None)
        if refusal is None:  # data files cut short, or not what `.metadata` describes (their checksums redone)
            cause = ", ".join(sorted({type(e).__name__ for e, _ in exc.failures.values()}))
            refusal = EncoderlabError(f"checkpoint's optimizer state {folder} is damaged: its data files do not hold "
                                      f"what {folder / '.metadata'} describes ({cause}); restore {folder} from a copy "
                                      f"of the checkpoint{older_hint(folder.parent)}")
        raise refusal from None
