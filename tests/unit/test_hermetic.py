"""The suite runs as on a fresh machine: its ENCODERLAB_HOME is an empty folder of its own (tests/conftest.py), never
the user's, so a test that passes here does not lean on an offline suite or cache that `make demo` left behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from encoderlab.core.io import encoderlab_home, task_cache


def test_the_home_is_the_suites_own():
    home = encoderlab_home()
    assert home == Path(os.environ["ENCODERLAB_HOME"])
    assert home != Path.home() / ".cache" / "encoderlab"
    assert home.name.startswith("encoderlab-test-home-") and home.parent == Path(tempfile.gettempdir())


def test_ci_gives_make_test_an_empty_home_and_tmpdir():
    script = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert 'export ENCODERLAB_HOME="$scratch/home" TMPDIR="$scratch/tmp"' in script
    assert script.rstrip().endswith("make test")


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_home_variable_is_unset_not_the_current_folder(monkeypatch, value):
    # As the XDG base-directory spec reads its variables: `ENCODERLAB_HOME= make demo` must not fill the cwd.
    monkeypatch.setenv("ENCODERLAB_HOME", value)
    assert encoderlab_home() == Path.home() / ".cache" / "encoderlab"


@pytest.mark.parametrize(("value", "names"), [("cache", "cache"), ("./cache/", "cache"), ("a/../cache", "a/../cache")])
def test_a_relative_home_is_the_absolute_folder_it_names_from_the_current_folder(tmp_path, monkeypatch, value,
                                                                                  names):
    """`ENCODERLAB_HOME=cache` is read against the current folder and used as that absolute folder, so that every
    message and record names the folder (a relative one named `cache/data/offline/tasks`, a packed folder recorded
    as `cache/...` is read against whatever folder a later command runs in). Nothing else is changed: `..` is kept,
    as the file system reads it (`a` may be a link)."""
    monkeypatch.setenv("ENCODERLAB_HOME", value)
    monkeypatch.chdir(tmp_path)
    assert encoderlab_home().is_absolute() and encoderlab_home() == tmp_path / names
    assert task_cache() == tmp_path / names / "cache" / "tasks"


def test_a_home_under_the_users_home_is_expanded(monkeypatch):
    monkeypatch.setenv("ENCODERLAB_HOME", "~/elsewhere")
    assert encoderlab_home() == Path.home() / "elsewhere"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("value", ["", "  ", "/somewhere/else"])
def test_make_picks_the_home_the_command_line_picks(monkeypatch, value):
    monkeypatch.setenv("ENCODERLAB_HOME", value)
    root = Path(__file__).resolve().parents[2]
    shown = subprocess.run(["make", "-s", "-C", str(root), "--eval", "print-home: ; @echo $$ENCODERLAB_HOME",
                            "print-home"], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(shown) == encoderlab_home()


def _make_dry_run(*args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(["make", "-n", "-C", str(root), *args], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("goals", [["clean"], ["gpu-check"], ["clean", "gpu-check"]])
def test_make_targets_that_install_nothing_ignore_the_installer(goals):
    # `make clean INSTALLER=bogus` removes the venv whatever installed it: refusing it would leave no way to clean.
    shown = _make_dry_run(*goals, "INSTALLER=bogus")
    assert shown.returncode == 0, shown.stderr
    assert "INSTALLER" not in shown.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("goals", [[], ["setup"], ["demo"], ["test"], ["lint"], ["clean", "setup"]])
def test_make_refuses_an_unknown_installer_before_installing_anything(goals):
    # Refused as the Makefile is read, so no recipe (not even `clean`'s in `make clean setup`) has run.
    shown = _make_dry_run(*goals, "INSTALLER=bogus")
    assert shown.returncode == 2
    assert "INSTALLER=bogus: give uv (the default) or pip" in shown.stderr
    assert "rm -rf" not in shown.stdout
