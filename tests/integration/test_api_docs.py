"""docs/api.md runs as written: its Python blocks, in order, in one namespace, in an empty folder holding the two
files the page says it holds (a text corpus and a classification task file)."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from conftest import WORDS, synthetic_documents

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_page_has_examples_of_every_entry_point():
    import encoderlab

    code = "\n".join(blocks())
    for name in ("prepare_data", "pretrain", "load", "finetune", "sweep", "run_study", "report_study", "export"):
        assert f"encoderlab.{name}(" in code, f"docs/api.md shows no call of encoderlab.{name}"
        assert callable(getattr(encoderlab, name)) and getattr(encoderlab, name).__doc__


def test_the_table_shows_each_functions_own_arguments_and_defaults():
    """Each `name(...)` of the page's table names arguments the function has, with its defaults (finetune's `save`
    and sweep's `save_models` were missing, and sweep's `workers` default differs from the command's)."""
    import ast
    import inspect

    import encoderlab

    shown = re.findall(r"^\| `(\w+)\((.*?)\)`", DOC.read_text(), flags=re.M)
    shown += re.findall(r" / `(\w+)\((.*?)\)`", DOC.read_text())
    assert {name for name, _ in shown} >= {"finetune", "sweep", "run_study", "report_study", "mteb", "pretrain"}
    for name, args in shown:
        params = inspect.signature(getattr(encoderlab, name)).parameters
        for arg in (a.strip() for a in args.split(",")):
            key, _, default = arg.partition("=")
            if key in ("*", "...") or not key:
                continue
            assert key in params, f"docs/api.md: {name}() has no argument {key}"
            if default:
                assert ast.literal_eval(default) == params[key].default, f"docs/api.md: {name}({key}={default})"


def write_reviews(folder: Path) -> None:
    """reviews.yaml and its splits: short texts whose label is the sentiment word they hold."""
    rng = random.Random(0)
    (folder / "reviews").mkdir()
    for split, n in (("train", 64), ("dev", 24), ("test", 24)):
        rows = [{"text": " ".join([*rng.choices(WORDS, k=5), label, *rng.choices(WORDS, k=3)]), "label": label}
                for label in rng.choices(("good", "bad"), k=n)]
        (folder / "reviews" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "reviews.yaml").write_text("family: classification\ntrain: reviews/train.jsonl\n"
                                         "validation: reviews/dev.jsonl\ntest: reviews/test.jsonl\n"
                                         "text_column: text\nlabel_column: label\n")


def test_no_api_name_is_also_a_subpackage():
    """Importing `encoderlab.X.y` sets the package's attribute X to the subpackage, hiding a function of that name:
    `encoderlab.pretrain(...)` would call a module once anything had imported encoderlab.pretraining's twin."""
    import encoderlab

    src = Path(encoderlab.__file__).parent
    assert {name for name in encoderlab.__all__ if (src / name).is_dir() or (src / f"{name}.py").exists()} == set()


def test_api_examples_run(tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n\n".join(d.text for d in synthetic_documents(300)))
    write_reviews(tmp_path)
    namespace: dict = {}
    for i, code in enumerate(blocks()):
        try:
            exec(compile(code, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - name the block that failed
            pytest.fail(f"docs/api.md block {i + 1} failed: {type(exc).__name__}: {exc}")
    assert Path(namespace["out"]["export"]).is_dir() and namespace["report"].exists()
