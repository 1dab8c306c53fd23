"""Files as every package writes and reads them: atomic files and folders (a reader sees either the old complete
version or the new complete one), JSON and JSON lines, checksums, write failures in one line, and the home folder
where data and caches live. Who may write a folder, and for how long a process lives, is core/process.py."""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from encoderlab.core import unique_names
from encoderlab.core.errors import DataError, EncoderlabError, WriteFailed, short
from encoderlab.core.leftovers import aside_name, remove_dead_leftovers, remove_path


def encoderlab_home() -> Path:
    """$ENCODERLAB_HOME, else ~/.cache/encoderlab. An empty or blank value counts as unset, as the XDG base-directory
    spec reads its variables: `ENCODERLAB_HOME= make demo` would otherwise put data and wheels in the current folder.
    The Makefile reads the variable the same way. A relative value (`ENCODERLAB_HOME=cache`) is read against the
    current folder and used as that absolute folder, so that messages and records (a prepared dataset's `packed`
    path) name the folder, not a path that a later command run elsewhere reads as another one."""
    value = os.environ.get("ENCODERLAB_HOME", "")
    return Path(value).expanduser().absolute() if value.strip() else Path.home() / ".cache" / "encoderlab"


def task_cache() -> Path:
    """Where tokenised tasks and their baselines are kept between sweeps (common.cached)."""
    return encoderlab_home() / "cache" / "tasks"


# The configs that ship inside the package (package data): the defaults of every command, and the presets and
# studies a user starts from. A clone's top-level configs/ is a link to this folder, so a clone and a wheel agree.
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """SHA-256 of a file, computed once per process for a given path, size and modification time: a model's weights
    are hashed once however many checks and records ask for its identity."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = sha256_of(path)
    return _DIGESTS[key]


# The causes of a failed write that the user fixes (space, quota, permissions, a file size limit), by errno.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EFBIG)
# A temporary sibling (`atomic_dir`, `atomic_file`) is named as the destination it is written for, not as itself.
_TEMPORARY = re.compile(r"/\.([^/]+)\.(?:tmp|old)-\d+(?:-[0-9a-f]+)?(?=/|$)")


def write_failure(exc: BaseException) -> str | None:
    """Why a write failed when the disk or permissions are the cause, else None (a bug keeps its traceback).
    Python raises OSError; safetensors a text with 'os error N'; torch.save (also inside DCP, which wraps it in a
    CheckpointException) only 'unexpected pos', without the errno."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            where = exc.filename and _TEMPORARY.sub(r"/\1", os.fsdecode(exc.filename))
            return f"{where}: {os.strerror(exc.errno)}" if where else os.strerror(exc.errno)
        text = str(exc)
        for code in WRITE_ERRNOS:
            if f"os error {code})" in text or os.strerror(code) in text:
                return os.strerror(code)
        if "unexpected pos" in text or "file write failed" in text:
            return "a write was cut short (is the disk full, or the quota or file size limit reached?)"
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Report a disk-full or permission failure inside the block as one line naming `path` and the cause (exit 1:
    work had started)."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit, GeneratorExit, EncoderlabError):
        raise
    except BaseException as exc:  # DCP's CheckpointException is not an Exception
        cause = write_failure(exc)
        if cause is None:
            raise
        raise WriteFailed(f"cannot write {path}: {cause.removeprefix(f'{path}: ')}; nothing was written there") from exc


def check_writable(path: Path, what: str, *, replaced: bool = False) -> None:
    """Refuse, before any work, an output folder this process cannot write: `path` itself, or the nearest folder
    above it that exists (where the missing ones will be made); with `replaced` (written whole beside it, then
    renamed over it) its parent. `what` names the option or key that gave the path. Root passes permission bits
    (it can write anyway); a read-only file system refuses root too, and so does a name longer than the file system
    takes or a folder where nothing can be made (/proc)."""
    path = Path(path)
    if os.path.lexists(path) and not _exists(path):  # a link to nowhere: a loop, or its target is gone
        raise EncoderlabError(f"{what} {path} is a symbolic link that leads to no file or folder ({os.readlink(path)}"
                              "): give a folder path, or remove the link")
    folder = path.parent if replaced else path
    while not _exists(folder) and folder != folder.parent:
        folder = folder.parent
    check_names(path, folder, what, replaced)
    if (_exists(path) and not path.is_dir()) or not folder.is_dir():
        bad = path if _exists(path) else folder
        raise EncoderlabError(f"{what} {path}: {bad} is a file, not a folder; give a folder path")
    if not os.access(folder, os.W_OK | os.X_OK):
        readonly = os.statvfs(folder).f_flag & os.ST_RDONLY
        why = "is on a read-only file system" if readonly else (
            f"is not writable by this user (mode {stat.S_IMODE(folder.stat().st_mode):04o})")
        raise EncoderlabError(f"{what} {path} cannot be written: {folder} {why}; choose another folder or change "
                              "its permissions")
    if folder != path and (why := cannot_create_in(folder)):  # where something is to be made
        raise EncoderlabError(f"{what} {path} cannot be written: nothing can be made in {folder} ({why}); choose "
                              "another folder")


def _exists(path: Path) -> bool:
    """Path.exists, False also for a name the file system cannot hold (too long), which check_names then names."""
    try:
        return path.exists()
    except OSError:
        return False


# Room kept: for the temporary siblings of a folder written whole and renamed (`.NAME.tmp-PID-XXXXXXXX`,
# `atomic_dir`), and, in a path, for what is written inside the output (a checkpoint's `dcp/__0_0.distcp`, ...).
SIBLING_ROOM, INSIDE_ROOM = 24, 256


def check_names(path: Path, folder: Path, what: str, replaced: bool = False) -> None:
    """Refuse a folder still to be made under `folder` whose name is longer than its file system takes (with
    `replaced`, room for its temporary sibling), or a path too long for what goes inside it."""
    limit = os.pathconf(folder, "PC_NAME_MAX")
    parts = Path(path).relative_to(folder).parts  # `folder` is `path` or a folder above it
    for i, part in enumerate(parts):
        allowed = limit - (SIBLING_ROOM if replaced and i == len(parts) - 1 else 0)
        if len(os.fsencode(part)) > allowed:
            raise EncoderlabError(f"{what} {path}: the name {part[:24]}... is {len(os.fsencode(part))} bytes long; "
                                  f"the file system of {folder} takes names of at most {limit}"
                                  + (f"; {allowed} leave room for the temporary folder written beside it"
                                     if allowed < limit else ""))
    longest = os.pathconf(folder, "PC_PATH_MAX") - INSIDE_ROOM
    if len(os.fsencode(os.path.abspath(path))) > longest:
        raise EncoderlabError(f"{what}: the path is {len(os.fsencode(os.path.abspath(path)))} bytes long; the file "
                              f"system takes at most {longest + INSIDE_ROOM}, and what goes inside needs room: keep it "
                              f"under {longest}")


def cannot_create_in(folder: Path) -> str | None:
    """Why no folder can be made in `folder`, or None: tried, not inferred from permission bits, which root passes
    and which say nothing of /proc-like file systems or immutable folders. Tried only where the caller is about to
    make something anyway, never inside an existing output folder that other processes may be listing."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".encoderlab-probe-", dir=folder))
    except OSError as e:
        return os.strerror(e.errno) if e.errno else str(e)
    return None


def folder_name(name: str) -> str:
    """`name` when it is one folder name, else ValueError (a config error): a name from a config or a file becomes
    a folder inside an output folder, and `..`, `a/b` or `/abs` would put it elsewhere."""
    if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        raise ValueError("must be one folder name (not empty, . or .., no / or \\): the folder OUT_DIR/NAME must "
                         "stay inside out_dir")
    return name


def umask() -> int:
    try:  # Linux: read without setting it (setting it to learn it races with threads creating files)
        return int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                        if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration):
        os.umask(mask := os.umask(0o022))
        return mask


@contextmanager
def atomic_dir(dest: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `dest`, on error it is removed (and what killed
    writers of `dest` left is removed first). What it holds gets the umask's permissions (0644 files, 0755 folders
    by default), whoever wrote it: safetensors writes its files 0600 and mkdtemp its folders 0700, and the rename
    would publish them so. A `dest` that is a symbolic link is replaced by the folder; what it led to is kept."""
    with writing(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_leftovers(dest)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        tmp.mkdir()
        try:
            yield tmp
            mask = umask()
            for path in [tmp, *tmp.rglob("*")]:
                path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)
            if os.path.lexists(dest):
                old = aside_name(dest)
                os.replace(dest, old)
                os.replace(tmp, dest)
                with suppress(OSError):  # the write succeeded: an old folder it cannot remove stays, a leftover
                    remove_path(old)
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
        with writing(path):
            yield tmp
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_json(path: Path, fix: str):
    """The JSON value in `path`, refused in one line saying what is wrong and `fix` when it is a folder, empty,
    unreadable or not JSON (each is a user's fix, not a bug, so not a traceback)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
        return json.loads(text)
    except IsADirectoryError:
        why = "is a folder, not a file"
    except OSError as e:
        why = f"cannot be read ({e.strerror})"
    except UnicodeDecodeError:
        why = "is not UTF-8 text"
    except ValueError as e:
        why = "is empty" if not text.strip() else f"is not JSON ({e})"
    raise DataError(f"{path} {why}: {fix}")


def read_unique_json(path: Path):
    """The JSON value of a file a user wrote (`utf8_text`: a byte order mark is no text), refused in one line naming
    the file and where it is wrong when it is empty, not JSON, or gives a key twice in one object (which json would
    read as its last value)."""
    text = utf8_text(path)
    if not text.strip():
        raise DataError(f"{path} is empty: JSON expected")
    try:
        return unique_names.loads(text)
    except unique_names.RepeatedKey as e:
        raise DataError(f"{path}:{e.line}: the object at column {e.column} gives the key {short(e.key, 60)} twice; "
                        f"{unique_names.UNIQUE_KEYS}") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None


def write_json(path: Path, obj) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_jsonl(path: Path, rows: Iterable[dict], digest=None) -> int:
    """Write `rows` as JSON Lines, atomically; `digest` (a hashlib object), if given, is fed the file's bytes."""
    n = 0
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        for row in rows:
            line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
            f.write(line)
            if digest is not None:
                digest.update(line)
            n += 1
    return n


def utf8_lines(path: Path) -> Iterator[str]:
    """The lines of a text file, ends kept (as `open(newline="")` gives them); bytes that are not UTF-8 fail
    naming the file and the line, not as a UnicodeDecodeError from somewhere in a block. A byte order mark at the
    start (spreadsheet programs write one) is not part of the text."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{line_no}: not UTF-8 text ({e.reason}: byte {raw[e.start]:#04x} at "
                                f"column {e.start + 1}); save the file as UTF-8") from None


def utf8_text(path: Path) -> str:
    """A UTF-8 text file's text; a byte order mark at the start is not text, and bytes that are not UTF-8 fail
    naming the line and column, not as a UnicodeDecodeError."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line, starts = data.count(b"\n", 0, e.start) + 1, data.rfind(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({e.reason}: byte {data[e.start]:#04x} at column "
                        f"{e.start - starts + 1}); save the file as UTF-8") from None


def text_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (`utf8_text`) without their ends, split as `open()` splits them (\\n, \\r\\n,
    or an old Mac's \\r alone)."""
    return io.StringIO(utf8_text(path), newline=None).read().split("\n")


def lone_surrogate(line: str, value) -> str | None:
    """What is wrong when a JSON line's parsed `value` holds a lone surrogate (a `\\ud800` escape without its
    pair: half of a UTF-16 character, which no UTF-8 text can hold and every later write or tokenizer would fail
    on), else None. Only a line with a `\\u` escape can hold one, so others cost nothing."""
    if "\\u" not in line:
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"the escape \\u{ord(e.object[e.start]):04x} is half of a UTF-16 surrogate pair without its other "
                "half, which is no character; give the whole pair or the character itself")
    return None


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> Iterator[dict]:
    """The objects of a JSON Lines file (blank lines skipped); a line that is not JSON or UTF-8, or lacks a
    `required` key, fails naming the file and the line."""
    return (row for _, row in numbered_jsonl(path, required))


def numbered_jsonl(path: Path, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each object of a JSON Lines file, as `read_jsonl` reads them."""
    for line_no, line in enumerate(utf8_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = unique_names.loads(line)
        except unique_names.RepeatedKey as e:
            raise DataError(f"{path}:{line_no}: {e}") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{line_no}: not valid JSON ({e.msg}); JSON Lines expected, one object a "
                            "line") from e
        if not isinstance(row, dict):
            raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
        if problem := lone_surrogate(line, row):
            raise DataError(f"{path}:{line_no}: {problem}")
        missing = [key for key in required if key not in row]
        if missing:
            raise DataError(f"{path}:{line_no}: missing {', '.join(missing)} (keys: {', '.join(row)})")
        yield line_no, row
