"""Readable top to bottom (docs/architecture.md, convention 4). A module is cut by concern, not by length: a source
file over `MAX_FILE_LINES` is a lint warning (`make lint`), to be read and split only where it holds two concerns.
A function over `MAX_FUNCTION_LINES` fails the tests (tests/unit/test_code_size.py) unless the file's first line is
a comment saying why it is longer.

    python tools/code_size.py [SRC]      # prints the long files and functions; exit 1 for a long function"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "encoderlab"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60


def long_files(src: Path) -> list[str]:
    return [f"{path.relative_to(src)}: {lines} lines" for path in sorted(src.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_FILE_LINES]


def long_functions(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        if text.startswith("# longer than"):  # the reason, on the first line
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(src)}:{node.lineno} {node.name}: {length} lines")
    return found


def main(src: Path) -> int:
    for line in long_files(src):
        print(f"warning: {line} (over {MAX_FILE_LINES}: does it hold more than one concern?)")
    functions = long_functions(src)
    for line in functions:
        print(f"error: {line} (over {MAX_FUNCTION_LINES}; or say why on the file's first line: '# longer than')")
    return 1 if functions else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC))
