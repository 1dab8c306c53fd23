"""Tokenise documents and pack them into fixed windows of `seq_len` tokens in memory-mapped shards.

Each document becomes `<bos> tokens <eos>`; documents are concatenated in order and the stream is cut into windows,
so nothing is padded. Beside every token file lies a file of the same shape holding the document index of every
token (uint32), from which the model builds block-diagonal / block-causal attention and per-document positions.

Documented behaviour:
- a document longer than a window continues in the next window(s) with the same document index; each piece then
  attends only within its window (the paper packs FineWeb-Edu documents of 12 to 2,048 tokens the same way);
- the stream's last partial window (< seq_len tokens) is dropped and counted in `dropped_tail_tokens`;
- a held-out split (`val_fraction`) is chosen per document by a hash of its id, so it is stable when the corpus grows;
- a token budget (`max_tokens`, whole windows) stops the train split at exactly that many tokens, in document order.

meta.json is the index: per shard its windows and the SHA-256 of both files (hashed from memory as they are
written, so it costs no extra read), the largest token id, and the size and SHA-256 of each file of the tokenizer
(`tokenizer_files`: ids mean something only with the tokenizer that made them). `check_shards` compares the files
with it, the tokenizer always by hash. meta.json says its `format_version` and is read through
`data/migrate_packed.py`: an index written before these fields existed is checked by size only, and its tokenizer by
loading it.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from encoderlab.core.errors import DataError, option_name, option_value, prepare_command
from encoderlab.core.io import atomic_dir, read_json, sha256_of, write_json
from encoderlab.data import migrate_packed
from encoderlab.data.documents import Document
from encoderlab.data.tokenizer import TextTokenizer, load_tokenizer

PACKING = 1  # how documents become windows and shard files: a change repacks prepared data (data/prepare.py)
META = "meta.json"
TOKENIZER = "tokenizer"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def is_heldout(doc_id: str, fraction: float) -> bool:
    if fraction <= 0:
        return False
    bucket = int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little") / 2**64
    return bucket < fraction


class _SplitWriter:
    """Accumulates a token stream and writes whole windows into shard files of at most `shard_windows` windows.
    Documents arrive in batches (flat tokens + lengths): a per-document Python loop would cost more than the
    tokenizer. Shard boundaries depend only on the stream, not on how it was batched."""

    def __init__(self, folder: Path, split: str, seq_len: int, dtype: np.dtype, shard_windows: int,
                 unk_id: int | None = None, framing_ids: tuple[int, ...] = ()):
        self.folder, self.split, self.seq_len, self.dtype = folder, split, seq_len, dtype
        self.shard_windows, self.unk_id, self.framing_ids = shard_windows, unk_id, np.array(framing_ids, dtype)
        self.unknown = 0  # windows' tokens that are the tokenizer's unknown token (`unk_id`)
        self.text_tokens = 0  # windows' tokens that are the documents' own, not the BOS/EOS framing them
        self.tokens: list[np.ndarray] = []
        self.docs: list[np.ndarray] = []
        self.buffered = 0
        self.shards: list[dict] = []
        self.documents = 0
        self.max_token_id = -1
        self.doc_index = open(folder / f"{split}.documents.tsv", "w", encoding="utf-8")
        self.doc_index.write("index\tid\tsource\ttokens\n")

    def add(self, tokens: np.ndarray, lengths: np.ndarray, rows: list[tuple[str, str]]) -> None:
        """`tokens`: the documents' `<bos> ids <eos>` one after the other; `rows`: their (id, source)."""
        first = self.documents
        self.documents += len(rows)
        self.doc_index.write("".join(f"{first + i}\t{d}\t{s}\t{n}\n"
                                     for i, ((d, s), n) in enumerate(zip(rows, lengths.tolist()))))
        self.tokens.append(tokens)
        self.docs.append(np.repeat(np.arange(first, self.documents, dtype=np.uint32), lengths))
        self.buffered += len(tokens)
        while self.buffered >= self.seq_len * self.shard_windows:
            self._flush(final=False)

    def _flush(self, final: bool) -> int:
        if not self.tokens:
            return 0
        tokens, docs = np.concatenate(self.tokens), np.concatenate(self.docs)
        n_windows = len(tokens) // self.seq_len
        if not final:
            n_windows = min(n_windows, self.shard_windows)
        cut = n_windows * self.seq_len
        if n_windows:
            name = f"{self.split}-{len(self.shards):05d}"
            written = {"tokens": tokens[:cut], "docids": docs[:cut]}
            for kind, array in written.items():
                array.tofile(self.folder / f"{name}.{kind}.bin")
            self.max_token_id = max(self.max_token_id, int(written["tokens"].max()))
            if self.unk_id is not None:  # one pass over the shard in memory: free beside the tokenizer's time
                self.unknown += int(np.count_nonzero(written["tokens"] == self.unk_id))
                self.text_tokens += cut - int(np.count_nonzero(np.isin(written["tokens"], self.framing_ids)))
            self.shards.append({"name": name, "windows": n_windows,
                                "sha256": {kind: hashlib.sha256(a.data).hexdigest() for kind, a in written.items()}})
        self.tokens, self.docs = [tokens[cut:]], [docs[cut:]]
        self.buffered = len(tokens) - cut
        return len(tokens) - cut

    def close(self) -> dict:
        while self.buffered >= self.seq_len:
            self._flush(final=False)
        dropped = self._flush(final=True)
        self.doc_index.close()
        windows = sum(s["windows"] for s in self.shards)
        return {"windows": windows, "tokens": windows * self.seq_len, "documents": self.documents,
                "dropped_tail_tokens": dropped, "shards": self.shards}


def with_specials(ids: list[list[int]], bos: int, eos: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(`<bos> ids <eos>` of every document one after the other, lengths with the two specials), vectorised."""
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids)) + 2
    ends = np.cumsum(lengths)
    out = np.empty(int(ends[-1]) if len(ids) else 0, dtype=dtype)
    text = np.ones(len(out), dtype=bool)
    text[ends - lengths] = text[ends - 1] = False
    out[ends - lengths], out[ends - 1] = bos, eos
    out[text] = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(text.sum()))
    return out, lengths


class Packer:
    """Routes documents, in their global order, to the train / validation writers, and stops the train split at
    exactly `max_tokens` (the document at the cut is truncated, every later one dropped, whatever the split)."""

    def __init__(self, folder: Path, seq_len: int, dtype: np.dtype, val_fraction: float, shard_tokens: int,
                 max_tokens: int | None = None, unk_id: int | None = None, framing_ids: tuple[int, ...] = ()):
        """`unk_id`: the tokenizer's unknown token, counted in the windows beside the text's own tokens, which are
        those that are not `framing_ids` (the BOS/EOS that `with_specials` adds; text never holds a special id)."""
        shard_windows = max(1, shard_tokens // seq_len)
        self.writers = {s: _SplitWriter(folder, s, seq_len, dtype, shard_windows, unk_id, framing_ids)
                        for s in ("train", "validation")}
        self.val_fraction, self.left = val_fraction, max_tokens
        self.documents = self.tokens = 0

    @property
    def full(self) -> bool:
        return self.left == 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray, rows: list[tuple[str, str]]) -> None:
        if self.full or not rows:
            return
        held = np.fromiter((is_heldout(d, self.val_fraction) for d, _ in rows), bool, count=len(rows))
        if self.left is not None:
            train_seen = np.cumsum(np.where(held, 0, lengths))
            if train_seen[-1] >= self.left:  # the budget ends inside this batch
                last = int(np.searchsorted(train_seen, self.left))
                lengths = lengths[:last + 1].copy()
                lengths[last] -= int(train_seen[last] - self.left)
                rows, held = rows[:last + 1], held[:last + 1]
                tokens = tokens[:int(lengths.sum())]
            self.left -= int(np.where(held, 0, lengths).sum())
        self.documents += len(rows)
        self.tokens += len(tokens)
        token_held = np.repeat(held, lengths)
        for split, pick, keep in (("train", ~held, ~token_held), ("validation", held, token_held)):
            if pick.any():
                self.writers[split].add(tokens[keep], lengths[pick], [r for r, p in zip(rows, pick) if p])

    def close(self) -> dict:
        return {s: w.close() for s, w in self.writers.items()}

    def max_token_id(self) -> int:
        return max(w.max_token_id for w in self.writers.values())


def check_shape(seq_len: int, val_fraction: float, max_tokens: int | None = None) -> None:
    """What `pack` needs, checked before any text is read or a tokenizer trained."""
    if max_tokens is not None and (max_tokens <= 0 or max_tokens % seq_len):
        raise DataError(f"--max-tokens {max_tokens:,} must be a positive multiple of --seq-len {seq_len} (whole "
                        f"windows), e.g. {max(1, max_tokens // seq_len) * seq_len:,}")
    if seq_len < 8:
        raise DataError(f"{option_value('seq-len', seq_len)} is too small; use at least 8 (the paper uses 2,048)")
    if not 0 <= val_fraction < 1:
        raise DataError(f"{option_value('val-fraction', val_fraction)} must be in [0, 1)")


def pack(documents: Iterable[Document], tokenizer: TextTokenizer, out: Path, *, seq_len: int,
         val_fraction: float = 0.0, shard_tokens: int = 2**26, chunk_documents: int = 2048,
         max_tokens: int | None = None, progress: Callable[[int, int], None] | None = None) -> dict:
    """Write packed shards under `out` (replaced atomically). Returns the metadata also written to meta.json."""
    check_shape(seq_len, val_fraction, max_tokens)
    dtype = token_dtype(tokenizer.vocab_size)
    with atomic_dir(out) as tmp:
        packer = Packer(tmp, seq_len, dtype, val_fraction, shard_tokens, max_tokens, tokenizer.unk_id,
                        (tokenizer.bos_id, tokenizer.eos_id))
        for chunk in chunks(documents, chunk_documents):
            tokens, lengths = with_specials(tokenizer.encode_batch([d.text for d in chunk]), tokenizer.bos_id,
                                            tokenizer.eos_id, dtype)
            packer.add(tokens, lengths, [(d.id, d.source) for d in chunk])
            if progress:
                progress(packer.documents, packer.tokens)
            if packer.full:
                break
        meta = finish(tmp, packer, tokenizer, seq_len, val_fraction, max_tokens)
    return meta


def no_validation_note(meta: dict) -> str | None:
    """What to say when a packed corpus has no validation window (its held-out documents are shorter than one
    window, or none was held out): pretraining on it reports no held-out loss."""
    held = meta["splits"]["validation"]
    if held["windows"]:
        return None
    why = (f"its {held['documents']:,} held-out document(s) have {held.get('dropped_tail_tokens', 0):,} tokens, "
           f"fewer than one window of {meta['seq_len']}" if held.get("documents") else "no document was held out")
    return (f"no validation window: {why}; pretraining on this data reports no validation loss (raise "
            f"{option_name('val-fraction')} from {meta['val_fraction']} to hold out more)")


# A tokenizer made for the text leaves well under 0.1% of it unknown (BERT's WordPiece on English prose); one token in
# a hundred lost is a tokenizer of another language, script or casing, or of too few tokens.
UNKNOWN_WARNING = 0.01


def unknown_note(meta: dict) -> str | None:
    """What to say when more than `UNKNOWN_WARNING` of the text's packed tokens are the tokenizer's unknown token."""
    unknown = meta.get("unknown_tokens")
    if unknown is None or unknown["share"] <= UNKNOWN_WARNING:
        return None
    return (f"{unknown['share']:.1%} of {unknown_of(unknown)} are the tokenizer's "
            f"unknown token {unknown['token']!r}: that text is lost to the model; a tokenizer made for this text "
            f"leaves well under {UNKNOWN_WARNING:.0%} (is it another language's or script's, of other casing, or of "
            "too few tokens?)")


def unknown_of(unknown: dict) -> str:
    """What the share of `unknown` (meta.json's `unknown_tokens`) is of, with its count: data packed before the
    text's own tokens were counted has its share of every packed token, BOS/EOS included."""
    if "text_tokens" in unknown:
        return f"the text's tokens ({unknown['count']:,} of {unknown['text_tokens']:,}, BOS/EOS not counted)"
    return f"the packed tokens ({unknown['count']:,}, BOS/EOS included)"


def finish(folder: Path, packer: Packer, tokenizer: TextTokenizer, seq_len: int, val_fraction: float,
           max_tokens: int | None) -> dict:
    """Close the writers and write meta.json and the tokenizer into `folder`; an empty or short stream, or one
    that ends before the token budget, is refused."""
    if packer.documents == 0:
        raise DataError("the corpus is empty: no document with text was found, nothing to pack")
    splits = packer.close()
    if splits["train"]["windows"] == 0:
        seq, fraction = option_name("seq-len"), option_name("val-fraction")
        train = splits["train"]["dropped_tail_tokens"]
        held = f" ({option_value('val-fraction', val_fraction)} held out {packer.tokens - train:,} more)" \
            if val_fraction else ""
        raise DataError(f"the train split has {train:,} tokens, fewer than one window of "
                        f"{option_value('seq-len', seq_len)}{held}: "
                        f"add text or lower {seq}" + (f" or {fraction}" if val_fraction else ""))
    if max_tokens is not None and not packer.full:
        raise DataError(f"the source has {splits['train']['tokens']:,} training tokens, fewer than --max-tokens "
                        f"{max_tokens:,}: add text or lower the budget")
    meta = {"format_version": migrate_packed.FORMAT, "seq_len": seq_len, "dtype": packer.writers["train"].dtype.name,
            "tokenizer": tokenizer.info(), "val_fraction": val_fraction, "splits": splits,
            "max_token_id": packer.max_token_id()}
    if max_tokens is not None:
        meta["max_tokens"] = max_tokens
    if tokenizer.unk_id is not None:  # beside `splits`, not in them: the data's fingerprint stays what it was
        # Of the text's own tokens: BOS/EOS are no text, and would hide the share in short documents
        count, text = (sum(getattr(w, k) for w in packer.writers.values()) for k in ("unknown", "text_tokens"))
        meta["unknown_tokens"] = {"token": tokenizer.token(tokenizer.unk_id), "id": tokenizer.unk_id, "count": count,
                                  "text_tokens": text, "share": round(count / text, 6) if text else 0.0}
    tokenizer.save(folder / TOKENIZER)
    meta["tokenizer_files"] = tokenizer_files(folder)
    write_json(folder / META, meta)
    return meta


def tokenizer_files(root: Path) -> dict:
    """{file: {bytes, sha256}} of the packed tokenizer: the data's ids mean something only with the tokenizer that
    made them, so it is part of the data's verified content (a few MB at most, hashed at every check)."""
    folder = Path(root) / TOKENIZER
    return {p.name: {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
            for p in sorted(folder.iterdir() if folder.is_dir() else []) if p.is_file()}


def check_tokenizer(root: Path, meta: dict, fix: str) -> None:
    """Refuse a packed tokenizer that is not the one the data was packed with: its files against meta.json's
    digests; data packed before they were recorded, by loading it and comparing its vocabulary and special ids."""
    folder, recorded = Path(root) / TOKENIZER, meta["tokenizer_files"]
    if recorded is not None:
        found = tokenizer_files(root)
        bad = next((n for n in sorted(recorded.keys() | found.keys()) if recorded.get(n) != found.get(n)), None)
        problem = None if bad is None else f"{folder / bad} " + (
            f"is missing ({META} lists it)" if bad not in found else f"is not listed in {META}" if bad not in recorded
            else f"differs from the one the data was packed with (its size or SHA-256 in {META})")
    else:
        problem = _unrecorded_tokenizer_problem(folder, meta["tokenizer"])
    if problem:
        raise DataError(f"packed tokenizer {problem}: {fix}")


def _unrecorded_tokenizer_problem(folder: Path, info: dict) -> str | None:
    try:
        found = load_tokenizer(folder).info()
    except DataError as e:
        return f"{folder} does not load ({e})"
    keys = ("vocab_size", "bos_id", "eos_id", "pad_id", "mask_id")
    differ = [f"{k} {found[k]} (meta.json: {info.get(k)})" for k in keys if found[k] != info.get(k)]
    return f"{folder} is not the one the data was packed with: {', '.join(differ)}" if differ else None


def chunks(items: Iterable[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_meta(root: Path) -> dict:
    """The index of the packed dataset at `root`, refused in one line when it is missing or does not read as one."""
    file = Path(root) / META
    if not file.exists():
        raise DataError(f"{root} is not a packed dataset (no {META}); create one with `{prepare_command()}`")
    meta = read_json(file, "prepare the data again")
    try:
        meta = migrate_packed.upgrade(meta, file)
        _check_index(meta)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e) or type(e).__name__
        raise DataError(f"{file} is not a valid index of packed shards ({what}): prepare the data again") from None
    return meta


def _check_index(meta: dict) -> None:
    """Raise KeyError, TypeError or ValueError unless `meta` has the fields readers use, with usable values."""
    if int(meta["seq_len"]) < 1 or int(meta["tokenizer"]["vocab_size"]) < 1 or not np.dtype(meta["dtype"]):
        raise ValueError("seq_len and vocab_size must be positive")
    if not all(isinstance(f, dict) for f in (meta["tokenizer_files"] or {}).values()):
        raise ValueError("tokenizer_files must map each file to its size and SHA-256")
    for split in meta["splits"].values():
        for shard in split["shards"]:
            if not isinstance(shard["name"], str) or int(shard["windows"]) < 0:
                raise ValueError(f"shard {shard['name']!r} of {shard['windows']} windows")


def shard_files(root: Path, meta: dict):
    """(path, expected bytes, recorded SHA-256 or None, what the size is made of) for every shard file."""
    seq_len, itemsize = int(meta["seq_len"]), np.dtype(meta["dtype"]).itemsize
    for split in meta["splits"].values():
        for shard in split["shards"]:
            for kind, size in (("tokens", itemsize), ("docids", 4)):
                parts = f"{shard['windows']} windows x {seq_len} tokens x {size} bytes"
                yield (Path(root) / f"{shard['name']}.{kind}.bin", shard["windows"] * seq_len * size,
                       shard.get("sha256", {}).get(kind), parts)  # format 1's may lack them


def check_shards(root: Path, meta: dict, *, hashes: bool, fix: str) -> None:
    """Refuse, naming the file, a shard whose size (and, with `hashes`, SHA-256 where recorded) is not what
    meta.json says; `fix` tells how to rebuild it."""
    for path, expected, sha256, parts in shard_files(root, meta):
        found = path.stat().st_size if path.is_file() else None
        if found is None:
            problem = f"is missing ({META} lists it)"
        elif found != expected:
            problem = f"has {found} bytes, {META} expects {expected} ({parts})"
        elif hashes and sha256 and sha256_of(path) != sha256:
            problem = f"does not match its SHA-256 in {META}: its bytes are damaged"
        else:
            continue
        raise DataError(f"packed shard {path} {problem}: {fix}")
    check_tokenizer(root, meta, fix)


def max_token_id(meta: dict) -> int:
    """The largest id a model reads from this data: its largest token or a special token the objectives insert
    (the mask)."""
    tok = meta["tokenizer"]
    return max([meta["max_token_id"], *(tok.get(f"{r}_id") or 0 for r in ("bos", "eos", "pad", "mask"))])


def fingerprint(meta: dict) -> str:
    """The identity of the data's content, wherever it lies: windows, shard hashes, tokenizer, length."""
    content = {k: meta[k] for k in ("seq_len", "dtype", "tokenizer", "splits")}
    if meta["tokenizer_files"] is not None:  # so that data packed before they were recorded keeps its identity
        content["tokenizer_files"] = meta["tokenizer_files"]
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
