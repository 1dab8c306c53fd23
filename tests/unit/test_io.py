"""core/io.py: files are replaced whole or not at all, a failed write leaves nothing behind and says why in one line,
outputs get the umask's permissions, unwritable folders and names that leave their folder are refused."""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest

from encoderlab.core.errors import DataError, EncoderlabError
from encoderlab.core.io import (
    atomic_dir,
    atomic_file,
    check_writable,
    folder_name,
    read_jsonl,
    utf8_lines,
    write_failure,
    write_json,
    write_jsonl,
)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    write_json(path, {"x": 1})
    with pytest.raises(RuntimeError), atomic_file(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == '{\n  "x": 1\n}\n' and list(tmp_path.iterdir()) == [path]


def test_json_lines_round_trip_and_count(tmp_path):
    assert write_jsonl(tmp_path / "b.jsonl", iter([{"a": 1}, {"a": 2}])) == 2
    assert list(read_jsonl(tmp_path / "b.jsonl")) == [{"a": 1}, {"a": 2}]
    assert write_jsonl(tmp_path / "c.jsonl", iter([])) == 0


def test_a_bad_json_line_names_the_file_and_line(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(Exception, match=r"d\.jsonl:3: not valid JSON"):
        list(read_jsonl(tmp_path / "d.jsonl"))
    (tmp_path / "e.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(Exception, match=r"e\.jsonl:1: missing b"):
        list(read_jsonl(tmp_path / "e.jsonl", required=("b",)))


def test_a_json_line_that_gives_a_key_twice_names_the_file_line_and_key(tmp_path):
    """A task file's row `{"text": ..., "label": "pos", "label": "neg"}` was read as "neg", silently."""
    (tmp_path / "t.jsonl").write_text('{"text": "a", "label": "pos"}\n{"text": "b", "label": "pos", "label": "neg"}\n')
    with pytest.raises(DataError, match=r"t\.jsonl:2: the key 'label' is given twice in one object; keys must be "
                                        "unique in an object"):
        list(read_jsonl(tmp_path / "t.jsonl"))


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def modes(root: Path) -> set[tuple[str, int]]:
    """('d' or 'f', permission bits) of `root` and everything under it."""
    return {("d" if p.is_dir() else "f", stat.S_IMODE(p.stat().st_mode)) for p in [root, *root.rglob("*")]}


def test_atomic_folders_and_files_get_the_umask_permissions(tmp_path, umask):
    with atomic_dir(tmp_path / "out" / "folder") as tmp:
        (tmp / "sub").mkdir()
        write_json(tmp / "sub" / "a.json", {})
    write_json(tmp_path / "out" / "b.json", {})
    assert modes(tmp_path / "out") == {("d", 0o777 & ~umask), ("f", 0o666 & ~umask)}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EFBIG])
def test_a_full_disk_is_one_line_naming_the_path_and_leaves_nothing(tmp_path, monkeypatch, code):
    write_json(tmp_path / "a.json", {"x": 1})

    def full(self, *args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(EncoderlabError, match=f"cannot write {tmp_path / 'a.json'}: {os.strerror(code)}"):
        write_json(tmp_path / "a.json", {"x": 2})
    with pytest.raises(EncoderlabError, match=f"cannot write {tmp_path / 'f'}: {os.strerror(code)}"), \
            atomic_dir(tmp_path / "f") as tmp:
        (tmp / "state.json").write_text("{}")
    monkeypatch.undo()
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temporary file or folder


def test_write_failures_are_recognised_in_what_torch_and_safetensors_raise():
    assert write_failure(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"))
    assert write_failure(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"))
    wrapped = RuntimeError("writer failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "quota")
    assert write_failure(wrapped) == os.strerror(errno.EDQUOT)
    assert write_failure(RuntimeError("shape mismatch")) is None  # a bug keeps its traceback
    assert write_failure(OSError(errno.ENOENT, "missing")) is None


def test_check_writable_refuses_files_on_the_way_and_accepts_folders_to_make(tmp_path):
    (tmp_path / "file").write_text("x")
    check_writable(tmp_path / "new" / "deeper", "--out")  # made on the way
    with pytest.raises(EncoderlabError, match=r"--out .*/file/sub: .*/file is a file, not a folder"):
        check_writable(tmp_path / "file" / "sub", "--out")
    with pytest.raises(EncoderlabError, match=r"out_dir .*/file: .*/file is a file"):
        check_writable(tmp_path / "file", "out_dir")


def test_check_writable_refuses_names_too_long_and_folders_nothing_can_be_made_in(tmp_path):
    with pytest.raises(EncoderlabError, match=r"--out .*: the name x{24}\.\.\. is 300 bytes long; the file system of "
                                              r".* takes names of at most \d+"):
        check_writable(tmp_path / ("x" * 300) / "sub", "--out")
    with pytest.raises(EncoderlabError, match=r"the name a{24}\.\.\. is 240 bytes long; .* 231 leave room for the "
                                              r"temporary folder written beside it"):
        check_writable(tmp_path / ("a" * 240), "--out", replaced=True)  # written whole beside, then renamed
    check_writable(tmp_path / ("a" * 240), "--out")
    deep = tmp_path.joinpath(*["b" * 250] * 18)
    with pytest.raises(EncoderlabError, match=r"^--out: the path is \d+ bytes long; the file system takes at most "):
        check_writable(deep, "--out")
    if Path("/proc/self").is_dir():  # procfs: permission bits let root in, but no folder can be made there
        with pytest.raises(EncoderlabError, match=r"out_dir /proc/x cannot be written: (nothing can be made in /proc"
                                                  r" \(|/proc is not writable by this user)"):
            check_writable(Path("/proc/x"), "out_dir")
    assert not list(tmp_path.iterdir())  # the probe leaves nothing behind
    check_writable(tmp_path, "--out")
    assert not list(tmp_path.iterdir())


def permission_bits_stop_us() -> bool:
    """False for root (os.geteuid() == 0) with CAP_DAC_OVERRIDE, which writes into read-only folders anyway."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o555)
        return not os.access(folder, os.W_OK)


@pytest.mark.skipif(not permission_bits_stop_us(), reason="running as root: read-only folders do not stop it")
def test_check_writable_refuses_a_read_only_folder_before_any_work(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "existing").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        with pytest.raises(EncoderlabError, match=r"--out .*/ro/x/y cannot be written: .*/ro is not writable by this "
                                                  r"user \(mode 0555\)"):
            check_writable(tmp_path / "ro" / "x" / "y", "--out")
        check_writable(tmp_path / "ro" / "existing", "--out")  # written into: its own permissions count
        with pytest.raises(EncoderlabError, match="cannot be written"):
            check_writable(tmp_path / "ro" / "existing", "--out", replaced=True)  # renamed over: the parent's
    finally:
        (tmp_path / "ro").chmod(0o755)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "/abs", "a\\b"])
def test_a_name_must_be_one_folder(name):
    with pytest.raises(ValueError, match="must be one folder name"):
        folder_name(name)
    assert folder_name("610m-clm50-mlm40-42k") == "610m-clm50-mlm40-42k"


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    from encoderlab.tasks.common import read_table

    path = tmp_path / "train.csv"
    path.write_bytes("\ufefftext,label\nfine \ufeff,pos\n".encode())  # as spreadsheet programs save UTF-8 CSV
    assert read_table(path) == [{"text": "fine \ufeff", "label": "pos"}]  # only the file's first bytes are the mark
    assert list(utf8_lines(path))[0] == "text,label\n"


def test_an_old_folder_that_cannot_be_removed_does_not_fail_the_write_that_replaced_it(tmp_path, monkeypatch):
    """The new folder is in place once renamed: the old one's removal failing said `cannot write DEST: ...; nothing
    was written there`, false, with DEST holding the new content."""
    dest = tmp_path / "out"
    (dest / "locked").mkdir(parents=True)
    (dest / "locked" / "old.txt").write_text("old")
    (dest / "locked").chmod(0o500)  # its file cannot be removed, so neither can the old folder
    if os.geteuid() == 0:  # root removes it anyway: the removal fails as it would for another user
        def refused(path, *args, **kwargs):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

        monkeypatch.setattr(shutil, "rmtree", refused)
    try:
        with atomic_dir(dest) as tmp:
            (tmp / "new.txt").write_text("new")
        monkeypatch.undo()
        assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    finally:
        for path in tmp_path.rglob("locked"):
            path.chmod(0o700)


def test_a_full_disk_inside_a_temporary_copy_names_the_destination_not_the_copy(tmp_path, monkeypatch):
    """OSError names the file it failed on: inside the temporary sibling (`.out.tmp-PID-XXXX/state.json`), a name
    the user never gave and that is gone once the message is read."""
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(EncoderlabError) as failed, atomic_dir(tmp_path / "out") as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "state.json").write_text("{}")
    assert str(failed.value) == (f"cannot write {tmp_path / 'out'}: {tmp_path / 'out' / 'sub' / 'state.json'}: No "
                                 "space left on device; nothing was written there")
    with pytest.raises(EncoderlabError) as failed:
        write_json(tmp_path / "a.json", {})
    assert str(failed.value) == f"cannot write {tmp_path / 'a.json'}: No space left on device; nothing was written " \
                                "there"
    assert list(tmp_path.iterdir()) == []


def stale_old(dest: Path) -> Path:
    """What a write of `dest` by this process leaves when its old folder's removal failed."""
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    (old / "inner").mkdir(parents=True)
    (old / "inner" / "old.txt").write_text("old")
    return old


def test_a_second_write_removes_the_old_folder_an_earlier_one_left(tmp_path):
    """The rename of `dest` onto a folder that is not empty failed with ENOTEMPTY, a traceback."""
    dest = tmp_path / "out"
    dest.mkdir()
    old = stale_old(dest)
    with atomic_dir(dest) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    assert not old.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_second_write_moves_the_old_folder_aside_under_its_own_name_when_the_left_one_stays(tmp_path, monkeypatch):
    dest = tmp_path / "out"
    dest.mkdir()
    old = stale_old(dest)

    def refused(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(shutil, "rmtree", refused)
    for text in ("new", "newer"):
        with atomic_dir(dest) as tmp:
            (tmp / "new.txt").write_text(text)
    monkeypatch.undo()
    assert (dest / "new.txt").read_text() == "newer" and (old / "inner" / "old.txt").read_text() == "old"
    aside = sorted(p.name for p in tmp_path.iterdir() if p != dest and p != old)
    assert len(aside) == 2 and all(name.startswith(f"{old.name}-") for name in aside), aside


def test_with_the_destination_missing_the_newest_old_folder_is_put_back(tmp_path):
    """A dead writer's old folder whose removal failed, then its kill between the two renames of the next write:
    the version put back is the one moved aside last, whatever the names' order."""
    import subprocess
    import sys

    from encoderlab.core.leftovers import remove_dead_leftovers

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dest = tmp_path / "out"
    for name, text in ((f".out.old-{child.pid}", "stale"), (f".out.old-{child.pid}-ffffffff", "previous")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "v.txt").write_text(text)
        time.sleep(0.05)  # a later change time, on any file system's clock
    assert remove_dead_leftovers(dest) == [f".out.old-{child.pid}", f".out.old-{child.pid}-ffffffff"]
    assert (dest / "v.txt").read_text() == "previous" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
