"""Deterministic, resumable, rank-sharded batches of packed windows.

The global order of windows is a function of (seed, epoch) only: epoch e visits every window once in the order of
`permutation(seed, e)`, and epochs follow each other without a gap. Global batch b is samples [b*B, (b+1)*B) of that
stream, and rank r of W takes the r-th contiguous slice of it. Hence ranks see disjoint data whose union is exactly
the single-process batch, the position is one integer (`samples_seen`), and a run resumed from it, even with a
different number of ranks, sees exactly the batches it would have seen.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from encoderlab.core.errors import DataError, EncoderlabError, Failed, prepare_command, resolved
from encoderlab.core.io import encoderlab_home
from encoderlab.data.packing import check_shards, read_meta


def prepare_again() -> str:
    """The fix of damaged packed data, as the caller runs it (command line or Python API)."""
    return f"prepare the data again (`{prepare_command('SOURCE', 'FOLDER', force=True)}`)"


def resolve_data(path: str) -> Path:
    """The packed dataset that a config's `data.path` names: 'offline', a packed/ folder, or the folder holding it."""
    root = encoderlab_home() / "data" / "offline" / "packed" if path == "offline" else Path(path)
    if (root / "packed" / "meta.json").exists():  # the folder `data prepare` printed, not its packed/ child
        root = root / "packed"
    if not (root / "meta.json").exists():
        out = Path(path).parent if Path(path).name == "packed" else path  # prepare writes OUT/packed
        hint = prepare_command("offline") if path == "offline" else prepare_command("SRC", out)
        raise EncoderlabError(f"no packed dataset at {resolved(root)}: create it with `{hint}`")
    return root


class PackedDataset:
    """Memory-mapped view of one split of a packed dataset: window i -> (tokens, document ids)."""

    def __init__(self, root: str | Path, split: str = "train"):
        self.root = Path(root)
        self.meta = read_meta(self.root)
        # Sizes only (hashing every shard at each start would cost minutes on a large corpus; prepare hashes them):
        # a cut file fails here, not as an mmap error in the middle of training.
        check_shards(self.root, self.meta, hashes=False, fix=prepare_again())
        if split not in self.meta["splits"]:
            raise DataError(f"{root} has no split {split!r}; it has {', '.join(self.meta['splits'])}")
        self.split = split
        self.seq_len = int(self.meta["seq_len"])
        self.vocab_size = int(self.meta["tokenizer"]["vocab_size"])
        dtype = np.dtype(self.meta["dtype"])
        self._tokens, self._docs, counts = [], [], []
        for shard in self.meta["splits"][split]["shards"]:
            shape = (shard["windows"], self.seq_len)
            name = shard["name"]
            self._tokens.append(np.memmap(self.root / f"{name}.tokens.bin", dtype=dtype, mode="r", shape=shape))
            self._docs.append(np.memmap(self.root / f"{shard['name']}.docids.bin", dtype=np.uint32, mode="r",
                                        shape=shape))
            counts.append(shard["windows"])
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def windows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens (N, T) int64 and document ids (N, T) int64 for global window indices."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"window index out of range [0, {len(self)})")
        shard = np.searchsorted(self._starts, indices, side="right") - 1
        tokens = np.empty((len(indices), self.seq_len), dtype=np.int64)
        docs = np.empty((len(indices), self.seq_len), dtype=np.int64)
        for s in np.unique(shard):
            rows = np.nonzero(shard == s)[0]
            local = indices[rows] - self._starts[s]
            tokens[rows] = self._tokens[s][local]
            docs[rows] = self._docs[s][local]
        if tokens.size and (top := int(tokens.max())) >= self.vocab_size:  # a shard damaged after packing
            row = int(np.argmax(tokens.max(axis=1) >= self.vocab_size))
            shard_name = self.meta["splits"][self.split]["shards"][int(shard[row])]["name"]
            # Found when read, so possibly after steps were taken: work that failed (exit 1), not a refusal
            raise Failed(f"{self.root / shard_name}.tokens.bin: window {int(indices[row])} holds token id {top}, "
                         f"beyond the tokenizer's {self.vocab_size}: the shard is damaged; {prepare_again()}")
        return tokens, docs


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B_local, T) int64
    doc_ids: torch.Tensor  # (B_local, T) int64, for document masks and positions
    step: int  # index of the global batch this slice belongs to


class PackedLoader:
    def __init__(self, dataset: PackedDataset, global_batch_size: int, *, seed: int = 0, rank: int = 0,
                 world_size: int = 1):
        if global_batch_size <= 0 or global_batch_size % world_size:
            raise DataError(f"global batch of {global_batch_size} sequences cannot be split evenly over "
                            f"{world_size} ranks: use a multiple of {world_size}")
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside [0, {world_size})")
        if len(dataset) == 0:
            raise DataError(f"split {dataset.split!r} of {dataset.root} holds no window")
        self.dataset, self.global_batch_size, self.seed = dataset, global_batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.samples_seen = 0
        self._epoch, self._perm = -1, np.empty(0, dtype=np.int64)

    def _order(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))
            self._epoch = epoch
        return self._perm

    def _global_indices(self, start: int, count: int) -> np.ndarray:
        """Samples [start, start + count) of the endless stream of epochs, as window indices."""
        n, parts, pos, end = len(self.dataset), [], start, start + count
        while pos < end:
            epoch, offset = divmod(pos, n)
            take = min(end - pos, n - offset)
            parts.append(self._order(epoch)[offset : offset + take])
            pos += take
        return np.concatenate(parts)

    def next_batch(self) -> Batch:
        per_rank = self.global_batch_size // self.world_size
        start = self.samples_seen + self.rank * per_rank
        tokens, docs = self.dataset.windows(self._global_indices(start, per_rank))
        step = self.samples_seen // self.global_batch_size
        self.samples_seen += self.global_batch_size
        return Batch(torch.from_numpy(tokens), torch.from_numpy(docs), step)

    def __iter__(self):
        while True:
            yield self.next_batch()

    @property
    def epoch(self) -> float:
        return self.samples_seen / len(self.dataset)

    def state_dict(self) -> dict:
        return {"seed": self.seed, "samples_seen": self.samples_seen, "global_batch_size": self.global_batch_size,
                "num_windows": len(self.dataset)}

    def load_state_dict(self, state: dict) -> None:
        if state["num_windows"] != len(self.dataset):
            raise DataError(f"cannot resume: the saved data position is for {state['num_windows']} windows but "
                            f"{self.dataset.root} ({self.dataset.split}) has {len(self.dataset)}; the data changed")
        if state["seed"] != self.seed:
            raise DataError(f"cannot resume: saved data seed {state['seed']} differs from configured {self.seed}")
        self.samples_seen = int(state["samples_seen"])
