"""A task family is one registered record (tasks/registry.py): outside the families' own modules, code asks the
record, names no family, and refuses a family it does not know by name, never treating it as another."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from encoderlab.core.errors import DataError, EncoderlabError
from encoderlab.tasks import load_task, registry, task_family
from encoderlab.tasks.families import BUILT_IN

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"
# The families' own home and the offline suite's builders, which write the built-in families' task folders
HOMES = (SRC / "tasks", SRC / "data" / "offline")
MOST_FILES_NAMING_A_FAMILY = 3  # issue 47: the protocol's per-family sections and retrieval's shared training


def family_strings(source: str) -> set[str]:
    """The built-in family names a module holds as string values. "tokens" also counts tokens, so it counts only
    where it is compared with a family or keys a dict beside another family's name."""
    names, found = set(BUILT_IN) - {"tokens"}, set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in names:
            found.add(node.value)
        elif isinstance(node, ast.Compare) and "family" in ast.unparse(node) and "'tokens'" in ast.unparse(node):
            found.add("tokens")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if "tokens" in keys and keys & names:
                found.add("tokens")
    return found


def test_the_scanner_sees_a_family_in_a_branch_and_a_table_and_not_a_token_count():
    assert family_strings('if task.family == "retrieval": pass') == {"retrieval"}
    assert family_strings('if family != "tokens": pass') == {"tokens"}
    assert family_strings('X = {"classification": 1, "tokens": 2}') == {"classification", "tokens"}
    assert family_strings('record = {"step": 1, "tokens": 640}\nn = r["tokens"]') == set()


def test_outside_the_families_few_modules_name_a_family():
    naming = {}
    for path in sorted(SRC.rglob("*.py")):
        if not any(home in path.parents for home in HOMES) and (found := family_strings(path.read_text())):
            naming[str(path.relative_to(SRC))] = sorted(found)
    assert len(naming) <= MOST_FILES_NAMING_A_FAMILY, naming


def test_every_built_in_family_is_registered_in_report_order():
    assert [f.name for f in registry.families()][:4] == list(BUILT_IN)
    assert [f.category for f in registry.families()][:4] == ["SC", "TC", "QA", "IR"]
    assert registry.family("retrieval").sequences == 2 and registry.family("qa").sequences == 1
    assert registry.by_category("TC").name == "tokens"


def test_an_unknown_family_is_refused_naming_the_known_ones():
    with pytest.raises(DataError, match=r"unknown task family 'sts'; known: classification, tokens, qa, retrieval"):
        registry.family("sts")
    with pytest.raises(DataError, match="unknown task category 'STS'"):
        registry.by_category("STS")


def test_a_task_file_of_an_unknown_family_is_refused_by_name(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\na,0\n")
    task = tmp_path / "mine.yaml"
    task.write_text("family: sts\ntrain: train.csv\nvalidation: train.csv\n")
    for read in (load_task, task_family):
        with pytest.raises(EncoderlabError, match=r"mine.yaml: family: unknown task family 'sts'; known: "):
            read(str(task))


def test_an_offline_folder_of_an_unknown_family_is_refused_by_name(tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "task.json").write_text('{"name": "odd", "family": "regression"}')
    with pytest.raises(DataError, match="unknown task family 'regression'; known: classification"):
        load_task("odd", root=tmp_path)


def test_records_of_an_unknown_family_are_refused_not_read_as_another():
    from encoderlab.tasks import baselines

    with pytest.raises(DataError, match="unknown task family 'sts'"):
        baselines.columns("sts", [])
    with pytest.raises(DataError, match="unknown task family 'sts'"):
        baselines.of_records([{"family": "sts", "baseline": {"test": {"score": 1.0}}}])


def test_a_family_cannot_take_a_known_name_or_category():
    record = registry.family("qa")
    with pytest.raises(ValueError, match="category 'QA' is family 'qa'"):
        registry.register(registry.Family(**{**record.__dict__, "name": "qa2"}))
    with pytest.raises(ValueError, match="is built in"):
        registry.unregister("qa")
