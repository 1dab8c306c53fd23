"""What killed or failed atomic writes (core/io.py `atomic_dir`, `atomic_file`) leave beside their destination: the
temporary sibling being written (`.NAME.tmp-PID-HEX`) and the previous version moved aside (`.NAME.old-PID`, or
`.NAME.old-PID-HEX` where an earlier one could not be removed), and how they are cleared."""
from __future__ import annotations

import glob
import os
import re
import secrets
import shutil
from contextlib import suppress
from pathlib import Path


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def aside_name(dest: Path) -> Path:
    """Where `atomic_dir` moves the previous `dest` before the new one goes in: `.NAME.old-PID`. One left there by an
    earlier write of this process (its removal failed) is removed first; if it still cannot be, a name of its own
    (`.NAME.old-PID-HEX`): a rename onto a folder that is not empty fails."""
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    if os.path.lexists(old):
        with suppress(OSError):
            remove_path(old)
    if os.path.lexists(old):
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    return old


def remove_dead_leftovers(dest: Path) -> list[str]:
    """Remove the temporary siblings of `dest` that a killed `atomic_dir` left (`.NAME.tmp-PID-*`, `.NAME.old-PID*`)
    once their writer PID no longer runs: a kill leaves a full-size copy that nothing else would remove. A live
    writer's are left alone. With `dest` missing (a kill came between the two renames) the newest `.old-` folder is
    the previous complete version: it is put back (an older one is a copy whose removal failed). Returns the names
    handled."""
    pattern = re.compile(rf"\.{re.escape(dest.name)}\.(tmp|old)-(\d+)(-[0-9a-f]+)?")
    dead = []
    for path in sorted(dest.parent.glob(f".{glob.escape(dest.name)}.*-*")):  # .old- before .tmp-
        found = pattern.fullmatch(path.name)
        if found is not None and not _running(int(found[2])):
            dead.append((path, found[1]))
    olds = [path for path, kind in dead if kind == "old"]
    # a rename sets the moved folder's change time: the last one moved aside is the newest version
    newest = max(olds, key=lambda p: p.lstat().st_ctime_ns) if olds and not os.path.lexists(dest) else None
    for path, _ in dead:
        if path == newest:
            os.replace(path, dest)
        else:
            remove_path(path, best_effort=True)
    return [path.name for path, _ in dead]


def remove_leftovers(folder: Path) -> list[str]:
    """Remove from `folder` what killed atomic writes left there (`.NAME.tmp-*` files and folders, `.NAME.old-*`
    folders); call it holding the folder's lock, when no other writer can be using them. Returns the names."""
    found = sorted(p for pattern in (".*.tmp-*", ".*.old-*") for p in Path(folder).glob(pattern))
    for path in found:
        remove_path(path, best_effort=True)
    return [p.name for p in found]


def remove_path(path: Path, best_effort: bool = False) -> None:
    """A folder with what it holds, or a file or link; with `best_effort`, what cannot be removed (or is gone) is left
    without an error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=best_effort)
    else:
        path.unlink(missing_ok=best_effort)
