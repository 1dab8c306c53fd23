"""The suite runs as on a fresh machine: its ENCODERLAB_HOME is an empty folder of its own (tests/conftest.py), never
the user's, so a test that passes here does not lean on an offline suite or cache that `make demo` left behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from encoderlab.core.io import encoderlab_home


def test_the_home_is_the_suites_own():
    home = encoderlab_home()
    assert home == Path(os.environ["ENCODERLAB_HOME"])
    assert home != Path.home() / ".cache" / "encoderlab"
    assert home.name.startswith("encoderlab-test-home-") and home.parent == Path(tempfile.gettempdir())


def test_ci_gives_make_test_an_empty_home_and_tmpdir():
    script = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert 'export ENCODERLAB_HOME="$scratch/home" TMPDIR="$scratch/tmp"' in script
    assert script.rstrip().endswith("make test")
