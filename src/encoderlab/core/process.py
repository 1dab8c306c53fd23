"""Processes and the folders they write: the lock that keeps one writer per output folder (its holder named in a
refusal), the removal of a refused start's folder, and worker processes that die with their parent."""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import check_writable


def drop_if_only_lock(folder: Path) -> None:
    """Remove `folder` if it holds nothing but its lock: a start refused in a folder it created leaves no folder
    behind. Call only for a folder the caller created, with the lock released."""
    if folder.is_dir() and [p.name for p in folder.iterdir()] == [".lock"]:
        shutil.rmtree(folder)


@contextmanager
def run_lock(folder: Path, what: str, shared: bool = False) -> Iterator[None]:
    """Hold `folder/.lock` while the block runs: one process at a time writes `what` into `folder`; another one is
    refused in one line naming the holder. The kernel releases the lock when its process dies, however it dies, so
    a dead process's lock file is simply taken over: its content only names the holder, it never decides. Taken
    before any work, it refuses first an unwritable folder. `shared`: any number of shared holders at once (each
    writing parts that lock themselves, like a study's `--job`s), none while an exclusive one holds it."""
    check_writable(folder, f"the folder of {what}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".lock"
    # Never deleted: a process that opened the old file could then lock it while another locks a new one.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EncoderlabError(f"cannot write {what} into {folder}: {_holder(path)} is writing there; wait "
                                  "for it to end or stop it (one process at a time writes a folder)") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": shlex.join(sys.argv)}
        if not shared:  # no shared holder is left: what names one was left by a killed one
            for stale in folder.glob(".lock.*"):
                stale.unlink(missing_ok=True)
        if shared:  # each shared holder names itself in a file of its own: one file would be overwritten
            mine = folder / f".lock.{holder['host']}.{holder['pid']}.{secrets.token_hex(4)}"
            mine.write_text(json.dumps(holder))
            try:
                yield
            finally:
                mine.unlink(missing_ok=True)
            return
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder).encode())
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released: the file names nobody
    finally:
        os.close(fd)


@contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` while the block runs, waiting for another holder to end: for a
    short read-and-rewrite of a file that writers of other folders share (a sweep's summary.json, which sweeps of
    other tasks rewrite side by side), where a second writer waits rather than being refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # never deleted, as run_lock's
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    """Who holds the lock: the exclusive holder the file names, else the shared holders' own files (a killed one's
    file may outlive it: its process is then gone, which is said)."""
    names = []
    for file in [path, *sorted(path.parent.glob(".lock.*"))]:
        try:
            holder = json.loads(file.read_text())
            if holder["host"] != socket.gethostname() or _alive(holder["pid"]):
                names.append(f"process {holder['pid']} on {holder['host']} ({holder['command']})")
        except (OSError, ValueError, KeyError, TypeError):  # nobody named, or a holder still writing its name
            continue
    return " and ".join(names) or "another process"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        pass
    return True


# glibc's mallopt parameters (<malloc.h>) and the environment settings of the same parameters, which win.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
_MALLOC_ENV = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_KEEP_FREED = {M_MMAP_MAX: ("MALLOC_MMAP_MAX_", 0), M_TRIM_THRESHOLD: ("MALLOC_TRIM_THRESHOLD_", 2**31 - 1)}


def keep_freed_memory_env() -> dict[str, str]:
    """The environment that gives a process encoderlab does not own (a baseline's subprocess) the setting of
    `keep_freed_memory`."""
    return {name: str(value) for name, value in _KEEP_FREED.values()}


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep the memory a process frees, so the next training step reuses its pages: call it first
    in a process encoderlab owns (the command, its worker processes). True when the setting was made.

    glibc serves every allocation over 32 MiB with a fresh `mmap` and unmaps it at `free`, so the largest tensors of
    each step (the LM loss's logits and probabilities: 64-128 MiB at micro) are page-faulted in anew every step, one
    fault per 4 KiB. With mmap off and trimming at 2 GiB, they come from the heap and stay there. The price is that a
    process's resident memory no longer shrinks after its peak. The numbers are the same bits; only where they live
    changes. Left alone where the user set these up (the environment variables or GLIBC_TUNABLES' glibc.malloc) and
    off glibc (macOS, musl). A preloaded malloc (jemalloc, tcmalloc) does not read it: harmless there."""
    if any(os.environ.get(name) for name in _MALLOC_ENV) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # only glibc has it (and mallopt's meaning)
        return False
    return all([bool(libc.mallopt(param, value)) for param, (_, value) in _KEEP_FREED.items()])


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def start_worker(parent: int) -> None:
    """The first call of a worker process encoderlab spawns (a pool's initializer): it dies with `parent`, and keeps
    freed memory as the command does (a spawned process starts from glibc's defaults)."""
    die_with_parent(parent)
    keep_freed_memory()


def die_with_parent(parent: int) -> None:
    """End this worker process as soon as process `parent` ends, however it ends: after a kill -9 no shutdown
    reaches a pool, and orphaned workers (and the resource tracker, which waits for them) would run on for nobody,
    writing into folders that a new run may be using (`start_worker` calls it)."""
    # Linux: the kernel kills this process when the thread that spawned it ends; a pool spawns its workers from
    # the thread that submits the work, which holds the pool to its end.
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0:
            if os.getppid() != parent:  # it ended before the request took effect
                os._exit(1)
            return
    except (OSError, AttributeError):  # no prctl: elsewhere than Linux
        pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:  # an orphan is adopted by another process
        time.sleep(1)
    os._exit(1)
