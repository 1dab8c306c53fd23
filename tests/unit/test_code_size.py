"""Readable top to bottom (docs/architecture.md, convention 4): no function over 60 lines unless the file's first
line is a comment saying why it is longer. A file's length is a lint warning (`make lint`, tools/code_size.py): a
module is cut by concern, not to fit a bound."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("code_size", ROOT / "tools" / "code_size.py")
code_size = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_size)


def test_functions_stay_short():
    assert code_size.long_functions(code_size.SRC) == []


def test_a_long_function_is_named_and_a_long_file_only_warned(tmp_path, capsys):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    assert code_size.long_functions(tmp_path) == ["m.py:1 f: 62 lines"]
    assert code_size.main(tmp_path) == 1
    (tmp_path / "m.py").write_text(f"# longer than 60 lines: a table\ndef f():\n{body}\n")
    assert code_size.long_functions(tmp_path) == []
    (tmp_path / "big.py").write_text("x = 1\n" * 450)
    assert code_size.long_files(tmp_path) == ["big.py: 450 lines"]
    assert code_size.main(tmp_path) == 0  # a long file is a warning, not a failure
    assert "warning: big.py: 450 lines" in capsys.readouterr().out
