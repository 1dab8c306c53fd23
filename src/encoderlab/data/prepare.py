"""`encoderlab data prepare`: text -> corpus/documents.jsonl -> tokenizer -> packed/ shards, each step cached.

The corpus is spooled to JSON Lines first so that training the tokenizer and packing read the same documents
without streaming a hub dataset twice, and so that every pretraining document can be audited afterwards.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from encoderlab.core.errors import CALLER, DataError, option, prepare_command, warn
from encoderlab.core.io import atomic_dir, encoderlab_home, read_jsonl, write_json, write_jsonl
from encoderlab.core.leftovers import remove_leftovers
from encoderlab.core.process import run_lock
from encoderlab.data import packing, shards, sources
from encoderlab.data.documents import Document
from encoderlab.data.offline import build as offline
from encoderlab.data.tokenizer import TextTokenizer, check_bpe_size, load_tokenizer, train_bpe

OFFLINE = "offline"


@dataclass
class PrepareOptions:
    vocab_size: int = 8192
    seq_len: int = 512
    val_fraction: float = 0.005
    tokenizer: str | None = None  # a tokenizer.json / HF folder to use instead of training a BPE
    tokenizer_max_documents: int = 200_000  # BPE merges stabilise long before the whole of a large corpus
    text_column: str = "text"
    txt_unit: str = "paragraph"
    on_invalid_utf8: str = "error"
    hf_config: str | None = None
    hf_split: str = "train"
    max_documents: int | None = None
    max_tokens: int | None = None  # the train split stops at exactly this many tokens (whole windows)
    shard: tuple[int, int] | None = None  # (I, N): tokenise only shard I of N into parts/ (shards.py)
    join: int | None = None  # N: pack the parts of shards 0..N-1
    force: bool = False

    def text_options(self) -> dict:
        return {"text_column": self.text_column, "txt_unit": self.txt_unit, "on_invalid_utf8": self.on_invalid_utf8}

    def flags(self, *fields: str) -> list[str]:
        """These options where they are not the defaults, as the command line spells them (`--seq-len 64`): what a
        command suggested to be pasted next must repeat of this one."""
        return [part for field in fields if (value := getattr(self, field)) != getattr(PrepareOptions, field)
                for part in (f"--{field.replace('_', '-')}", str(value))]


def default_out(source: str) -> Path:
    name = OFFLINE if source == OFFLINE else Path(source.rstrip("/")).name.split(".")[0] or "dataset"
    return encoderlab_home() / "data" / name.replace("/", "--")


def prepare(source: str, out: Path | None = None, opts: PrepareOptions | None = None,
            log: Callable[[str], None] = print) -> dict:
    """Each step is written atomically; a failed or interrupted first prepare also removes the folders it created,
    so that nothing half-made looks like a dataset."""
    opts = opts or PrepareOptions()
    # before hours of reading text and training a tokenizer
    packing.check_shape(opts.seq_len, opts.val_fraction, opts.max_tokens)
    _check_sharding(source, opts)
    if not opts.tokenizer:
        check_bpe_size(opts.vocab_size)
    out = Path(out) if out else default_out(source)
    if opts.shard:  # its parts are kept whatever happens: the next run resumes from them
        return shards.prepare_shard(source, out, opts, log)
    created = next((p for p in [*reversed(out.parents), out] if not p.exists()), None)
    # One writer per output: two prepares into one folder would each report their own data over a mix of both.
    # A refused second writer removes nothing (the folder may be the first one's, created a moment ago).
    with run_lock(out, "a prepared dataset"):
        try:
            if left := remove_leftovers(out):  # a killed prepare's half-written folders and files
                log(f"removed what an interrupted prepare left in {out}: {', '.join(left)}")
            return _prepare(source, out, opts, log)
        except BaseException:
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            raise


def _check_sharding(source: str, opts: PrepareOptions) -> None:
    if opts.shard is None and opts.join is None:
        return
    flag = "--shard" if opts.shard else "--join"
    problems = [
        (opts.shard and opts.join, "--shard and --join are two steps: run the shards, then one join"),
        (not opts.tokenizer, f"{flag} needs --tokenizer: every shard must tokenise with the same one"),
        (source == OFFLINE, "the offline suite is prepared in one process (no --shard/--join)"),
        (opts.max_documents is not None, f"{flag} reads the whole source: give the join --max-tokens instead of "
                                         "--max-documents"),
        (opts.shard and opts.max_tokens, "--max-tokens is the join's: a shard tokenises all its units"),
        (opts.join is not None and opts.join < 1, f"--join {opts.join}: the number of shards must be at least 1"),
    ]
    for problem, message in problems:
        if problem:
            raise DataError(message)


def _join(source: str, out: Path, opts: PrepareOptions, log: Callable[[str], None]) -> dict:
    start = time.perf_counter()
    corpus, meta = shards.join(source, out, opts, log)
    if note := packing.unknown_note(meta):
        warn(note, log)
    summary = _summary(source, out, corpus, str(out / "parts"), meta,
                       {"join": time.perf_counter() - start, "total": time.perf_counter() - start})
    write_json(out / "summary.json", summary)
    return summary


def _prepare(source: str, out: Path, opts: PrepareOptions, log: Callable[[str], None]) -> dict:
    if opts.join:
        return _join(source, out, opts, log)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    packed = _packed_index(source, out, opts)
    given = load_tokenizer(opts.tokenizer) if opts.tokenizer else None  # before the text; part of the fingerprint
    suite = None
    if source == OFFLINE:
        suite = _offline_text(out, opts, log)
    else:
        _local_text(source, out, opts, log)
    timings["text"] = time.perf_counter() - start
    corpus_file = out / "corpus" / "documents.jsonl"
    fingerprint = _fingerprint(out / "corpus" / "manifest.json", opts, given)
    t0 = time.perf_counter()
    meta = packed if packed is not None and packed.get("inputs") == fingerprint else None
    bpe = None if given is not None else _bpe_inputs(out / "corpus" / "manifest.json", opts)
    if meta is not None:
        log(f"packed shards up to date in {out / 'packed'}")
    else:
        tok = _trained_before(packed, bpe, out, log) or _tokenizer(corpus_file, opts, log, given)
        timings["tokenizer"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        log(f"packing into windows of {opts.seq_len} tokens (held out for validation: {opts.val_fraction:.1%})")
        meta = packing.pack(_documents(corpus_file), tok, out / "packed", seq_len=opts.seq_len,
                            val_fraction=opts.val_fraction, max_tokens=opts.max_tokens)
        meta["inputs"] = fingerprint
        if bpe is not None:
            meta["bpe_inputs"] = bpe
        write_json(out / "packed" / packing.META, meta)
        timings["pack"] = time.perf_counter() - t0
        if note := packing.no_validation_note(meta):
            log(note)
    if note := packing.unknown_note(meta):  # up to date or not: the data is read so, said at every prepare
        warn(note, log)
    timings["total"] = time.perf_counter() - start
    summary = _summary(source, out, json.loads((out / "corpus" / "manifest.json").read_text()), str(corpus_file),
                       meta, timings)
    if suite is not None:
        summary["tasks"] = {name: {"family": st["family"],
                                   **{s: d.get("examples", d.get("queries")) for s, d in st["splits"].items()}}
                            for name, st in suite["tasks"].items()}
        summary["tasks_root"] = str(out / "tasks")
    write_json(out / "summary.json", summary)
    return summary


def _summary(source: str, out: Path, corpus: dict, corpus_file: str, meta: dict, timings: dict) -> dict:
    summary = {
        "source": source,
        "root": str(out),
        "corpus": corpus,
        "corpus_file": corpus_file,
        "packed": str(out / "packed"),
        "tokenizer": str(out / "packed" / "tokenizer"),
        "vocab_size": meta["tokenizer"]["vocab_size"],
        "seq_len": meta["seq_len"],
        "dtype": meta["dtype"],
        "splits": {s: {k: v for k, v in d.items() if k != "shards"} for s, d in meta["splits"].items()},
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }
    for key in ("max_tokens", "unknown_tokens"):
        if key in meta:
            summary[key] = meta[key]
    return summary


def _packed_index(source: str, out: Path, opts: PrepareOptions) -> dict | None:
    """The index of the shards already in `out` (None: none, or an unreadable one, so they are packed), once their
    files are checked against it (sizes and SHA-256), before any text is read. Shards that their own index says are
    damaged are refused rather than silently replaced (something damaged them after the fact), unless --force."""
    try:
        meta = None if opts.force else packing.read_meta(out / "packed")
    except DataError:
        return None
    if meta is not None:
        packing.check_shards(out / "packed", meta, hashes=True,
                             fix=f"pack them again with `{prepare_command(source, out, force=True)}`")
    return meta


def _offline_text(out: Path, opts: PrepareOptions, log) -> dict:
    suite_file = out / "suite.json"
    if suite_file.exists() and not opts.force:
        suite = json.loads(suite_file.read_text())
        if suite.get("recipe") == offline.RECIPE_VERSION:
            # Every file checked (a few MB): a cut task file once passed as "up to date". The build is
            # deterministic, so building it again is the recovery.
            if (changed := offline.changed_file(out, suite)) is None:
                log(f"offline tasks and corpus up to date in {out}")
                return suite
            log(f"{changed}: building the offline suite again")
    log("building the offline suite (tasks and leak-free corpus)")
    # Two processes from the command line only: the Python API's caller may be a script without a main guard, which
    # a spawned process would run again (docs/api.md).
    return offline.build_offline_suite(out, log=log, parallel=CALLER.get() == "cli")


def _local_text(source: str, out: Path, opts: PrepareOptions, log) -> None:
    docs = sources.iter_documents(source, text_column=opts.text_column, txt_unit=opts.txt_unit,  # type: ignore[arg-type]
                                  on_invalid_utf8=opts.on_invalid_utf8, hf_config=opts.hf_config,  # type: ignore[arg-type]
                                  hf_split=opts.hf_split, max_documents=opts.max_documents)
    counts: Counter[str] = Counter()
    lines: dict[str, int] = {}  # each .txt file's first paragraph, in lines
    words = chars = 0

    def rows() -> Iterator[dict]:
        nonlocal words, chars
        for d in docs:
            if not counts:  # said once the first record is read, so a source refused at once is one line
                log(f"reading {sources.describe_spec(source)}")
            counts[d.source] += 1
            if counts[d.source] == 1 and d.source.removesuffix(".gz").endswith(".txt"):
                lines[d.source] = d.text.count("\n") + 1
            words += len(d.text.split())
            chars += len(d.text)
            yield corpus_row(d)

    digest = hashlib.sha256()  # the corpus's content: the packed cache keys on it, not only on counts
    with atomic_dir(out / "corpus") as tmp:
        n = write_jsonl(tmp / "documents.jsonl", rows(), digest)
        if n == 0:
            raise DataError(f"no document with text found in {source} (empty files, or empty column "
                            f"{opts.text_column!r}?)")
        write_json(tmp / "manifest.json", {"source": source, "documents": n, "words": words, "characters": chars,
                                           "documents_by_source": dict(sorted(counts.items())),
                                           "sha256": digest.hexdigest()})
    if opts.txt_unit == "paragraph":
        _warn_one_paragraph({name: n for name, n in lines.items() if counts[name] == 1}, log)


def corpus_row(d: Document) -> dict:
    """A line of corpus/documents.jsonl: the user's own `id` and `source` where their records had them, and then
    encoderlab's (where the text was read, for the audit) under encoderlab_id and encoderlab_source."""
    row = {"id": d.id, "source": d.source, "text": d.text}
    for key, value in d.own:
        row[f"encoderlab_{key}"], row[key] = row[key], value
    return row


# A file of this many lines without a blank line is one document a line far more often than one long paragraph.
ONE_PARAGRAPH_LINES = 100


def _warn_one_paragraph(single: dict[str, int], log: Callable[[str], None]) -> None:
    """Warn of the .txt files read as one paragraph of many lines (`single`: source -> its lines): a corpus of one
    document a line, read so, is one document, with no validation window and every line attending to the others."""
    long = sorted(name.removeprefix("local:") for name, n in single.items() if n >= ONE_PARAGRAPH_LINES)
    if not long:
        return
    names = f"{', '.join(long[:3])}{', ...' if len(long) > 3 else ''}"
    shown = (f"{long[0]}: its {single['local:' + long[0]]} lines hold" if len(long) == 1
             else f"{len(long)} .txt files ({names}) hold {ONE_PARAGRAPH_LINES}+ lines and")
    warn(f"{shown} no blank line, so they were read as one document{'' if len(long) == 1 else ' each'} "
         f"({option('txt-unit', 'paragraph')}); if each line is a document, give {option('txt-unit', 'line')}", log)


def _documents(corpus_file: Path) -> Iterator[Document]:
    for row in read_jsonl(corpus_file):
        own = tuple((key, row[key]) for key in ("id", "source") if f"encoderlab_{key}" in row)
        yield Document(row.get("encoderlab_id", row["id"]), row.get("encoderlab_source", row["source"]), row["text"],
                       own)


def _tokenizer(corpus_file: Path, opts: PrepareOptions, log, given: TextTokenizer | None) -> TextTokenizer:
    if given is not None:
        tok = given
        log(f"tokenizer {opts.tokenizer}: {tok.vocab_size} tokens"
            + (f", of which {', '.join(tok.added_tokens)} added by encoderlab (the source model's vocabulary lacks "
               f"{'it' if len(tok.added_tokens) == 1 else 'them'})" if tok.added_tokens else ""))
        return tok
    log(f"training a byte-level BPE with {opts.vocab_size} tokens")

    def texts() -> Iterator[str]:
        for i, doc in enumerate(_documents(corpus_file)):
            if i >= opts.tokenizer_max_documents:
                return
            yield doc.text

    tok = train_bpe(texts(), opts.vocab_size)
    if tok.vocab_size < opts.vocab_size:  # the model's vocabulary is the tokenizer's (pretraining/setup.py)
        warn(f"the corpus gave a byte-level BPE of {tok.vocab_size} tokens, not the {opts.vocab_size} asked "
             f"({option('vocab-size', opts.vocab_size)}): its text has no more pairs seen twice to merge; the "
             f"tokenizer and a model pretrained on this data have {tok.vocab_size} (add text for more)", log)
    return tok


def _bpe_inputs(manifest: Path, opts: PrepareOptions) -> str:
    """What a trained BPE is made from: the corpus and the two options its training reads. BPE training is
    deterministic, so a BPE made from the same is the same: a repack for another window length reuses it."""
    import tokenizers

    parts = [manifest.read_text(), str(opts.vocab_size), str(opts.tokenizer_max_documents), tokenizers.__version__]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _trained_before(packed: dict | None, bpe: str | None, out: Path, log) -> TextTokenizer | None:
    """The BPE the shards in `out` were packed with, when it was trained from what this one would be (`bpe`)."""
    if bpe is None or packed is None or packed.get("bpe_inputs") != bpe:  # (its files checked with the shards')
        return None
    log(f"tokenizer: the byte-level BPE of {out / 'packed' / packing.TOKENIZER}, trained from the same corpus and "
        "settings (repacking only)")
    return load_tokenizer(out / "packed" / packing.TOKENIZER)


def _fingerprint(manifest: Path, opts: PrepareOptions, given: TextTokenizer | None) -> str:
    """Identifies what the packed shards were made from; a change in any of it repacks."""
    parts = [manifest.read_text(), str(opts.vocab_size), str(opts.seq_len), str(opts.val_fraction),
             str(opts.tokenizer), str(opts.tokenizer_max_documents), str(packing.PACKING)]
    if opts.max_tokens is not None:  # only then, so data prepared before the budget existed stays up to date
        parts.append(f"max_tokens={opts.max_tokens}")
    if given is not None:  # the same path may hold another tokenizer tomorrow: key on its content as loaded, a
        # folder's vocab.txt (no tokenizer.json) and special tokens included
        parts += [given.tokenizer.to_str(), json.dumps(given.info(), sort_keys=True),
                  json.dumps(given.hf_settings, sort_keys=True, default=str)]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()
