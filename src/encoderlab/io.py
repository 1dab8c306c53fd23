"""The bottom layer every package may use: atomic files and folders (a reader sees either the old complete version
or the new complete one), JSON and JSON lines, checksums, the lock that keeps one writer per output folder, and the
home folder where data and caches live."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from encoderlab.errors import DataError, EncoderlabError


def encoderlab_home() -> Path:
    return Path(os.environ.get("ENCODERLAB_HOME", Path.home() / ".cache" / "encoderlab")).expanduser()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def atomic_dir(dest: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `dest`, on error it is removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-"))
    try:
        yield tmp
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling path to write; it replaces `path` when the block ends (a reader sees the old
    complete file or the new one) and is removed if the block fails."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, obj) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    n = 0
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> Iterator[dict]:
    """The objects of a JSON Lines file (blank lines skipped); a line that is not JSON, or lacks a `required` key,
    fails naming the file and the line."""
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{line_no}: not valid JSON ({e.msg}); JSON Lines expected, one object a "
                                "line") from e
            if not isinstance(row, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            missing = [key for key in required if key not in row]
            if missing:
                raise DataError(f"{path}:{line_no}: missing {', '.join(missing)} (keys: {', '.join(row)})")
            yield row


@contextmanager
def run_lock(folder: Path, what: str) -> Iterator[None]:
    """Hold `folder/.lock` while the block runs: one process at a time writes `what` into `folder`; another one is
    refused in one line naming the holder. The kernel releases the lock when its process dies, however it dies, so
    a dead process's lock file is simply taken over: its content only names the holder, it never decides."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".lock"
    # Never deleted: a process that opened the old file could then lock it while another locks a new one.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EncoderlabError(f"cannot write {what} into {folder}: {_holder(path)} is writing there; wait "
                                  "for it to end or stop it (one process at a time writes a folder)") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": shlex.join(sys.argv)}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder).encode())
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released: the file names nobody
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text())
        return f"process {holder['pid']} on {holder['host']} ({holder['command']})"
    except (OSError, ValueError, KeyError, TypeError):  # the holder is still writing its name
        return "another process"
