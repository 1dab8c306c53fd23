"""Data preparation throughput: tokenise + pack tokens/s per core, one process and two, as `data prepare --shard`.

The text is the offline corpus (`encoderlab data prepare offline` first; else synthetic sentences), written as 8
parquet files like a FineWeb-Edu download. For each tokenizer, the sharded step (`prepare_shard`: read parquet,
encode_batch, add BOS/EOS, write a part and its TSV, hash both; timed from the first part's start to the last part's
end) runs in 1 process, then in 2 processes at once
(shards 0/2 and 1/2), each single-threaded (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), so tokens/s is per
core; the scaling ratio is the 2 processes' tokens over the span from the first start to the last end, divided by
the single process's rate. Each worker also times the tokenizer's own `encode_batch`: the rest is what encoderlab
adds. Then the join (`--join 2`, no tokenising) is timed. Tokenizers:
  offline       the offline suite's 8,192-token byte-level BPE (~/.cache/encoderlab/data/offline/packed/tokenizer)
  llama3-shape  a 128,256-entry byte-level BPE with Llama-3's pre-tokenizer regex, trained here on the corpus
                (no hub), cached under $ENCODERLAB_HOME/bench/bpe-128k

    python benchmarks/prepare_throughput.py                 # the whole offline corpus (~10M tokens), both tokenizers
    python benchmarks/prepare_throughput.py --quick         # smoke test: 4,000 documents
    python benchmarks/prepare_throughput.py --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
os.environ.update(ENV)  # before tokenizers is imported: its thread pool is sized once

from encoderlab.core.io import encoderlab_home  # noqa: E402

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_VOCAB = 128_256


def texts(limit: int | None) -> list[str]:
    corpus = encoderlab_home() / "data" / "offline" / "corpus" / "documents.jsonl"
    if corpus.exists():
        out = []
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                out.append(json.loads(line)["text"])
                if limit and len(out) >= limit:
                    break
        return out
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.conftest import synthetic_documents
    return [d.text for d in synthetic_documents(limit or 40_000)]


def llama3_shape_bpe(corpus: list[str], quick: bool) -> Path:
    """A 128,256-entry BPE in Llama-3's shape (its split regex, byte-level, 256 special tokens)."""
    out = encoderlab_home() / "bench" / f"bpe-128k{'-quick' if quick else ''}" / "tokenizer.json"
    if out.exists():
        return out
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(254)]
    trainer = trainers.BpeTrainer(vocab_size=LLAMA3_VOCAB, special_tokens=specials, min_frequency=1,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out


def write_source(corpus: list[str], folder: Path, files: int = 8) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = folder / "src"
    src.mkdir(parents=True)
    for i in range(files):
        pq.write_table(pa.table({"text": corpus[i::files]}), src / f"train-{i:05d}.parquet")
    return src


def worker(src: str, out: str, tokenizer: str, shard: str) -> None:
    """One shard, timed in-process from its first part's start to its last part's end (imports, loading the
    tokenizer: excluded, they do not grow with the data); prints its tokens, span and encode_batch seconds."""
    from encoderlab.data import shards
    from encoderlab.data.prepare import PrepareOptions, prepare
    from encoderlab.data.tokenizer import TextTokenizer

    encode, write_part, spent, marks = TextTokenizer.encode_batch, shards._write_part, [0.0], []

    def timed_encode(self, batch):
        t = time.perf_counter()
        ids = encode(self, batch)
        spent[0] += time.perf_counter() - t
        return ids

    def timed_part(*args):
        marks.append(time.time())
        manifest = write_part(*args)
        marks.append(time.time())
        return manifest

    TextTokenizer.encode_batch, shards._write_part = timed_encode, timed_part  # type: ignore[method-assign]
    i, n = map(int, shard.split("/"))
    prepare(src, Path(out), PrepareOptions(tokenizer=tokenizer, shard=(i, n)), log=lambda _: None)
    tokens = sum(json.loads(p.read_text())["tokens"] for p in Path(out, "parts").glob("part-*.json")
                 if int(p.stem.split("-")[1]) % n == i)
    print(json.dumps({"start": marks[0], "end": marks[-1], "tokens": tokens, "encode_seconds": spent[0]}))


def shards(src: Path, out: Path, tokenizer: Path, n: int) -> dict:
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", f"{i}/{n}", str(src), str(out), str(tokenizer)],
                              stdout=subprocess.PIPE, env={**os.environ, **ENV}) for i in range(n)]
    results = [json.loads(p.communicate()[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed")
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    busy = sum(r["end"] - r["start"] for r in results)
    return {"processes": n, "tokens": tokens, "seconds": round(span, 2), "tokens_per_s": tokens / span,
            "tokens_per_s_per_core": tokens / span / n,
            "tokenizer_share": round(sum(r["encode_seconds"] for r in results) / busy, 3)}


def join(src: Path, out: Path, tokenizer: Path) -> dict:
    """`--join 2` into windows of 2,048; its rate counts the reading, checking and packing of the parts, from the
    first part read to the last window written (loading and saving the tokenizer, ~1 s for 128K entries, apart)."""
    from encoderlab.data import packing, shards
    from encoderlab.data.prepare import PrepareOptions, prepare

    read_part, close, marks = shards._read_part, packing.Packer.close, {}

    def first_read(*args):
        marks.setdefault("start", time.perf_counter())
        return read_part(*args)

    def timed_close(self):
        splits = close(self)
        marks["end"] = time.perf_counter()
        return splits

    shards._read_part, packing.Packer.close = first_read, timed_close  # type: ignore[method-assign]
    start = time.perf_counter()
    try:
        s = prepare(str(src), out, PrepareOptions(tokenizer=str(tokenizer), join=2, seq_len=2048),
                    log=lambda _: None)
    finally:
        shards._read_part, packing.Packer.close = read_part, close  # type: ignore[method-assign]
    tokens = sum(v["tokens"] for v in s["splits"].values())
    seconds = marks["end"] - marks["start"]
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": tokens / seconds,
            "seconds_with_tokenizer": round(time.perf_counter() - start, 2)}


def tokenizer_file(name: str, corpus: list[str], quick: bool) -> Path:
    if name == "llama3-shape":
        return llama3_shape_bpe(corpus if quick else texts(None), quick)
    if name != "offline":
        raise SystemExit(f"--tokenizers {name!r}: choose from offline, llama3-shape")
    path = encoderlab_home() / "data" / "offline" / "packed" / "tokenizer" / "tokenizer.json"
    if not path.exists():
        raise SystemExit(f"the offline tokenizer is missing ({path}): run `encoderlab data prepare offline` first, "
                         "or pass --tokenizers llama3-shape")
    return path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4,000 documents: checks that it works, numbers are noise")
    ap.add_argument("--documents", type=int, default=None, help="this many documents (default: all; --quick 4,000)")
    ap.add_argument("--tokenizers", default="offline,llama3-shape")
    ap.add_argument("--json", type=Path, help="Also write the results here.")
    ap.add_argument("--worker", nargs=4, metavar=("SHARD", "SRC", "OUT", "TOKENIZER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        shard, src, out, tokenizer = args.worker
        return worker(src, out, tokenizer, shard)
    corpus = texts(args.documents or (4_000 if args.quick else None))
    results = {"documents": len(corpus), "cores": os.cpu_count(), "tokenizers": {}}
    for name in args.tokenizers.split(","):
        tokenizer = tokenizer_file(name, corpus, args.quick)
        with tempfile.TemporaryDirectory(prefix="prepare-bench-") as tmp:
            src = write_source(corpus, Path(tmp))
            one = shards(src, Path(tmp) / "one", tokenizer, 1)
            two = shards(src, Path(tmp) / "two", tokenizer, 2)
            joined = join(src, Path(tmp) / "two", tokenizer)
        row = {"one_process": one, "two_processes": two, "scaling": round(two["tokens_per_s"] /
                                                                           one["tokens_per_s"], 2), "join": joined}
        results["tokenizers"][name] = row
        print(f"{name:>13}: 1 process {one['tokens_per_s_per_core'] / 1e6:.2f}M tokens/s per core "
              f"(tokenizer {100 * one['tokenizer_share']:.0f}% of it); 2 processes "
              f"{two['tokens_per_s'] / 1e6:.2f}M tokens/s = {row['scaling']:.2f}x; join "
              f"{joined['tokens_per_s'] / 1e6:.0f}M tokens/s ({one['tokens']:,} tokens)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
