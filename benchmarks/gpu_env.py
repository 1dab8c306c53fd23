"""The wheels that let `make gpu-check` run on a GPU machine without network (standard library only).

The GPU machines lent to this project have Python 3.12 with their own torch (2.11) and transformers (5.17) and no
network; some of encoderlab's other requirements (pydantic, datasets, seqeval at least) are missing. Here, where
PyPI is reachable, `prepare(folder)` resolves encoderlab's requirements (all but torch and transformers) for CPython
3.12 on manylinux x86_64, next to the transformers the machine has so that versions agree with it, and downloads
their wheels into `folder` (git-ignored; it travels with the code), leaving out torch, transformers and the large
packages that machine's image already holds (LARGE_ON_IMAGE). seqeval publishes no wheel: one is built here (pure
Python).

There, `install(folder)` installs only the requirements that the machine does not already satisfy, with
`pip install --no-index --find-links folder --prefix OVERLAY`: nothing is fetched, pip keeps every installed package
that satisfies a requirement, and a constraints file pins the machine's torch and transformers, so they are never
replaced. The caller puts OVERLAY's site-packages on PYTHONPATH.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE_OWN = ("torch", "transformers")  # the GPU machine's own builds: never shipped, pinned when installing
# On the GPU image (docs/benchmarks.md, "GPU"), and too large to carry within the 64 MiB the code travels in.
LARGE_ON_IMAGE = ("numpy", "scipy", "pyarrow", "pandas", "scikit-learn", "matplotlib", "tensorboard",
                  "tensorboard-data-server", "grpcio", "pillow", "fonttools", "contourpy", "kiwisolver", "protobuf",
                  "tokenizers", "hf-xet", "triton", "sympy", "networkx")
NO_WHEEL_ON_PYPI = ("seqeval",)  # built into a wheel here
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
          *[a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                        "manylinux2014_x86_64") for a in ("--platform", p)]]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))


def requirements() -> list[str]:
    """encoderlab's requirements (pyproject.toml), without torch and transformers."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if requirement_name(d) not in MACHINE_OWN]


def shipped(name: str) -> bool:
    name = normalize(name)
    return name not in MACHINE_OWN and name not in LARGE_ON_IMAGE and not name.startswith("nvidia-")


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def prepare(folder: Path, transformers: str = "5.17.0") -> list[Path]:
    """Download (and build where PyPI has no wheel) the wheels `install` needs into `folder`; returns them."""
    folder.mkdir(parents=True, exist_ok=True)
    reqs = requirements()
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder),
         *[r for r in reqs if requirement_name(r) in NO_WHEEL_ON_PYPI])
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report), "--target", tmp,
             "--find-links", str(folder), *TARGET, *reqs, f"transformers=={transformers}")
        resolved = json.loads(report.read_text())["install"]
    pins = [f"{m['name']}=={m['version']}" for m in (r["metadata"] for r in resolved)
            if shipped(m["name"]) and normalize(m["name"]) not in NO_WHEEL_ON_PYPI]
    _pip("download", "--quiet", "--no-deps", "--dest", str(folder), *TARGET, *pins)
    wheels = sorted(folder.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {folder} (left out, on the GPU image: torch, transformers, "
          f"{', '.join(LARGE_ON_IMAGE)})")
    return wheels


def unsatisfied(reqs: list[str]) -> list[str]:
    """The requirements this interpreter does not satisfy (missing, or at a version outside the range)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    missing = []
    for text in reqs:
        req = Requirement(text)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(text)
            continue
        if not req.specifier.contains(version, prereleases=True):
            missing.append(text)
    return missing


def install(folder: Path, overlay: Path) -> Path | None:
    """Install the unsatisfied requirements from `folder` under `overlay`; its site-packages, or None if nothing
    was missing."""
    from importlib import metadata

    todo = unsatisfied(requirements())
    if not todo:
        return None
    if not folder.is_dir() or not any(folder.glob("*.whl")):
        raise SystemExit(f"{', '.join(todo)} missing here and no wheels in {folder}: run `make gpu-wheels` where "
                         "PyPI is reachable, and bring that folder along")
    constraints = overlay / "constraints.txt"
    overlay.mkdir(parents=True, exist_ok=True)
    constraints.write_text("".join(f"{name}=={metadata.version(name)}\n" for name in MACHINE_OWN
                                   if _installed(name)))
    print(f"installing {', '.join(todo)} from {folder} into {overlay}", flush=True)
    _pip("install", "--quiet", "--no-index", "--find-links", str(folder), "--prefix", str(overlay),
         "--no-warn-script-location", "--constraint", str(constraints), *todo)
    site = sysconfig.get_path("purelib", vars={"base": str(overlay), "platbase": str(overlay)})
    return Path(site)


def _installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def python_path(*entries: Path) -> str:
    return os.pathsep.join([*map(str, entries), *filter(None, [os.environ.get("PYTHONPATH")])])
