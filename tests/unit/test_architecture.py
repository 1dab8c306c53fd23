"""The package graph is one-way (docs/architecture.md): a package imports only from itself and the layers below it,
so no two packages import each other, and no module imports itself through others. Every import counts,
function-local and relative ones included."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"
# Bottom to top, one package a layer (docs/architecture.md).
LAYERS = [("core",), ("data",), ("model",), ("runs",), ("pretraining",), ("tasks",), ("finetuning",), ("hub",),
          ("study",), ("cli",), ("api",)]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def unit_of(module: str) -> str | None:
    """'encoderlab.data.offline.qa' -> 'data'; None for modules outside encoderlab."""
    parts = module.split(".")
    return parts[1] if parts[0] == "encoderlab" and len(parts) > 1 else None


def module_name(src: Path, path: Path) -> str:
    parts = ("encoderlab", *path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str = "encoderlab.x", package: bool = False) -> list[tuple[int, str]]:
    """(line, imported module or name) for every import of encoderlab in the file (`module`; relative imports are
    resolved against it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".")[:len(module.split(".")) - node.level + package] if node.level else []
            where = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, f"{where}.{alias.name}") for alias in node.names]  # a name or a submodule
    return [(line, name) for line, name in found if unit_of(name)]


def violations(src: Path) -> list[str]:
    problems = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        # The root __init__ is the API's face (it loads encoderlab.api on first use), so it sits where the API does.
        here = rel.parts[0].removesuffix(".py").replace("__init__", "api")
        for line, module in imports_of(path.read_text(), module_name(src, path), path.name == "__init__.py"):
            there = unit_of(module)
            if there not in LAYER or here not in LAYER:
                problems.append(f"{rel}:{line} imports {module}: {here if here not in LAYER else there} is in no "
                                "layer of docs/architecture.md")
            elif there != here and LAYER[there] > LAYER[here]:
                problems.append(f"{rel}:{line} imports {module}: {here} (layer {LAYER[here]}) may not import from "
                                f"{there} (layer {LAYER[there]}, above it)")
    return problems


def module_cycle(src: Path) -> list[str]:
    """One chain of modules that import each other in a circle (function-local imports included), or []."""
    modules = {module_name(src, p): p for p in src.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, imported in imports_of(path.read_text(), name, path.name == "__init__.py"):
            while imported and imported not in modules:  # a name imported from a module: that module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = sorted(targets)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return []


def test_no_module_imports_itself_through_others():
    assert module_cycle(SRC) == []


def test_a_module_cycle_is_named(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.py").write_text("from encoderlab.data.b import f\n")
    (tmp_path / "data" / "b.py").write_text("def g():\n    from . import a\n")
    assert module_cycle(tmp_path) in (["encoderlab.data.a", "encoderlab.data.b", "encoderlab.data.a"],
                                      ["encoderlab.data.b", "encoderlab.data.a", "encoderlab.data.b"])


def test_every_import_goes_down_the_layers():
    assert SRC.exists()
    assert violations(SRC) == []


def test_every_package_and_module_has_a_layer():
    units = {p.name.removesuffix(".py") for p in SRC.iterdir() if (p.suffix == ".py" or p.is_dir())
             and p.name not in ("__init__.py", "__pycache__", "configs")}  # configs: package data
    assert units - set(LAYER) == set(), "add the new package to LAYERS and to docs/architecture.md"


@pytest.mark.parametrize(("where", "line", "expected"), [
    ("model/x.py", "from encoderlab.runs.checkpoint import save", "model (layer 2) may not import from runs"),
    ("data/x.py", "    from encoderlab.finetuning import records", "data (layer 1) may not import from finetuning"),
    ("core/io.py", "from encoderlab.pretraining import objectives", "core (layer 0) may not import from pretraining"),
    ("runs/x.py", "from encoderlab.pretraining.config import PretrainConfig",
     "runs (layer 3) may not import from pretraining"),
    ("tasks/x.py", "from encoderlab.finetuning.protocol import Protocol",
     "tasks (layer 5) may not import from finetuning"),
    ("pretraining/x.py", "import encoderlab.cli.commands", "pretraining (layer 4) may not import from cli"),
])
def test_a_back_edge_is_named(tmp_path, where, line, expected):
    file = tmp_path / where
    file.parent.mkdir(parents=True, exist_ok=True)
    body = f"def f():\n{line}\n" if line.startswith(" ") else line + "\n"
    file.write_text("from encoderlab.core.errors import EncoderlabError\n" + body)
    (found,) = violations(tmp_path)
    line_no = 3 if line.startswith(" ") else 2  # function-local imports are found too
    assert found.startswith(f"{where}:{line_no} imports ") and expected in found


def test_a_downward_import_is_allowed(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "x.py").write_text("from encoderlab.hub.importer import import_hf\n"
                                             "import encoderlab.core.io\n")
    assert violations(tmp_path) == []


# What only the one attention choice may touch: the backends' constructors, the eager/flash threshold and SDPA's
# kernel selection. Anything else asks model/attention.py (for_pretraining, for_finetuning, for_batched,
# for_inference), so that a kernel is never picked in two places with two rules.
CHOICE_ONLY = ("Dense(", "Varlen(", "Flex(", "EAGER_MAX_LEN", "sdpa_kernel", "SDPBackend", "form_for(")


def attention_choices_outside(src: Path) -> list[str]:
    return [f"{path.relative_to(src)}:{n}: {word}" for path in sorted(src.rglob("*.py"))
            if path.relative_to(src).as_posix() != "model/attention.py"
            for n, line in enumerate(path.read_text().splitlines(), start=1) if not line.lstrip().startswith("#")
            for word in CHOICE_ONLY if word in line]


def test_the_attention_is_chosen_in_one_module(tmp_path):
    assert attention_choices_outside(SRC) == []
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "attention.py").write_text("EAGER_MAX_LEN = 192\n")
    (tmp_path / "engine.py").write_text("with sdpa_kernel(SDPBackend.MATH):\n    pass\n")
    assert attention_choices_outside(tmp_path) == ["engine.py:1: sdpa_kernel", "engine.py:1: SDPBackend"]
