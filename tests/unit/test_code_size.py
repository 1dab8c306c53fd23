"""Readable top to bottom (docs/architecture.md, convention 4): no source file over 400 lines and no function over 60,
unless the file's first line is a comment saying why it is longer."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60


def too_long(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        if text.startswith("# longer than"):  # the reason, on the first line
            continue
        rel, lines = path.relative_to(src), text.count("\n") + 1
        if lines > MAX_FILE_LINES:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return found


def test_files_and_functions_stay_short():
    assert too_long(SRC) == []


def test_a_long_function_is_named(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    assert too_long(tmp_path) == ["m.py:1 f: 62 lines"]
    (tmp_path / "m.py").write_text(f"# longer than 60 lines: a table\ndef f():\n{body}\n")
    assert too_long(tmp_path) == []
