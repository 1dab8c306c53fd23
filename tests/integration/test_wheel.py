"""`pip install .` behaves as a clone does: the configs that commands default to (protocols, presets, studies) are
package data, so the wheel holds every one of them and an installed `encoderlab finetune` uses the same default
protocol, read from the installed package."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import train_tiny, write_classification_task

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "src" / "encoderlab" / "configs"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel .` builds from a copy of the project's packaging files and sources."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(tree)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("encoderlab-*.whl")
    return built


def test_the_wheel_holds_every_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"encoderlab/configs/{p.relative_to(CONFIGS).as_posix()}" for p in CONFIGS.rglob("*.yaml")}
    assert len(shipped) > 20 and shipped - names == set()
    assert {"encoderlab/configs/eval/demo.yaml", "encoderlab/configs/studies/demo.yaml", "encoderlab/py.typed",
            "encoderlab/api.py"} <= names


def test_an_installed_finetune_uses_the_shipped_protocol(wheel, tmp_path, packed_dir, one_thread):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip puts in site-packages; the dependencies are this venv's
    checkpoint = train_tiny(tmp_path / "runs", packed_dir)
    task = write_classification_task(tmp_path / "task")
    env = {**os.environ, "PYTHONPATH": str(site), "ENCODERLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "encoderlab.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)

    assert "configs/eval/demo.yaml, shipped with encoderlab" in " ".join(cli("finetune", "--help").stdout.split())
    run = cli("finetune", str(checkpoint), str(task), "--lr", "1e-3", "--set", "max_steps=1", "--out", "evals")
    assert run.returncode == 0, run.stderr
    assert f"protocol: {site / 'encoderlab' / 'configs' / 'eval' / 'demo.yaml'}" in run.stderr
