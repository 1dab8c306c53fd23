"""The package graph is one-way (docs/architecture.md): a package imports only from itself and the layers below it,
so no two packages import each other. Every import counts, function-local ones included."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"
# Bottom to top. The foundation modules may use each other (config reports errors); nothing else shares a layer.
LAYERS = [("errors", "io", "seeds", "config"), ("data",), ("model",), ("objectives",), ("train",), ("evaluation",),
          ("hub",), ("study",), ("cli",)]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def unit_of(module: str) -> str | None:
    """'encoderlab.data.offline.qa' -> 'data'; None for modules outside encoderlab."""
    parts = module.split(".")
    return parts[1] if parts[0] == "encoderlab" and len(parts) > 1 else None


def imports_of(source: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import of an encoderlab module in the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "encoderlab":  # `from encoderlab import objectives`
                found += [(node.lineno, f"encoderlab.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, module) for line, module in found if unit_of(module)]


def violations(src: Path) -> list[str]:
    problems = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        here = rel.parts[0].removesuffix(".py")
        if here == "__init__":
            continue
        for line, module in imports_of(path.read_text()):
            there = unit_of(module)
            if there not in LAYER or here not in LAYER:
                problems.append(f"{rel}:{line} imports {module}: {here if here not in LAYER else there} is in no "
                                "layer of docs/architecture.md")
            elif there != here and LAYER[there] > LAYER[here]:
                problems.append(f"{rel}:{line} imports {module}: {here} (layer {LAYER[here]}) may not import from "
                                f"{there} (layer {LAYER[there]}, above it)")
    return problems


def test_every_import_goes_down_the_layers():
    assert SRC.exists()
    assert violations(SRC) == []


def test_every_package_and_module_has_a_layer():
    units = {p.name.removesuffix(".py") for p in SRC.iterdir() if (p.suffix == ".py" or p.is_dir())
             and p.name not in ("__init__.py", "__pycache__")}
    assert units - set(LAYER) == set(), "add the new package to LAYERS and to docs/architecture.md"


@pytest.mark.parametrize(("where", "line", "expected"), [
    ("model/x.py", "from encoderlab.train.checkpoint import save", "model (layer 2) may not import from train"),
    ("data/x.py", "    from encoderlab.evaluation import records", "data (layer 1) may not import from evaluation"),
    ("io.py", "from encoderlab import objectives", "io (layer 0) may not import from objectives"),
    ("train/x.py", "import encoderlab.cli.commands", "train (layer 4) may not import from cli"),
])
def test_a_back_edge_is_named(tmp_path, where, line, expected):
    file = tmp_path / where
    file.parent.mkdir(parents=True, exist_ok=True)
    body = f"def f():\n{line}\n" if line.startswith(" ") else line + "\n"
    file.write_text("from encoderlab.errors import EncoderlabError\n" + body)
    (found,) = violations(tmp_path)
    line_no = 3 if line.startswith(" ") else 2  # function-local imports are found too
    assert found.startswith(f"{where}:{line_no} imports ") and expected in found


def test_a_downward_import_is_allowed(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "x.py").write_text("from encoderlab.hub.importer import import_hf\nimport encoderlab.io\n")
    assert violations(tmp_path) == []
