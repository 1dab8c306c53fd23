"""YAML says what it means: a key given twice in one mapping is refused with its file, line and name, in every YAML
encoderlab reads (configs and their `base:` chains, `--set` values, task files, studies, protocols, run folders)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from encoderlab.core.config import ConfigError, apply_overrides, load_yaml, read_yaml

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"


def test_a_repeated_key_is_refused_naming_its_line_and_the_first():
    with pytest.raises(Exception, match=r"key 'optim' is given twice in one mapping \(first on line 1\)") as caught:
        read_yaml("optim:\n  lr: 1.0e-3\ntrain: {}\noptim:\n  weight_decay: 0.1\n")
    assert caught.value.problem_mark.line + 1 == 4
    with pytest.raises(Exception, match="key 'lr' is given twice"):
        read_yaml("optim: {lr: 1, lr: 2}\n")  # on one line too
    with pytest.raises(Exception, match="key 1.0 is given twice"):
        read_yaml("1: a\n1.0: b\n")  # equal values are the same key, as the mapping would keep one


def test_what_is_not_a_repetition_still_reads():
    assert read_yaml("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}  # the same key in two mappings
    merged = read_yaml("base: &b {lr: 1, wd: 0}\nrun:\n  <<: *b\n  lr: 2\n")  # a merge key is overridden, not repeated
    assert merged["run"] == {"lr": 2, "wd": 0}
    assert read_yaml("- {a: 1}\n- {a: 1}\n") == [{"a": 1}, {"a": 1}]


def test_a_config_and_its_base_name_the_file_and_line(tmp_path):
    (tmp_path / "base.yaml").write_text("train:\n  steps: 10\n  steps: 20\n")
    (tmp_path / "run.yaml").write_text("base: base.yaml\noptim: {lr: 1.0e-3}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'base.yaml'}:3:3: not valid YAML: key 'steps' is "
                                                    "given twice in one mapping (first on line 2): keep one")):
        load_yaml(tmp_path / "run.yaml")


def test_a_set_value_is_read_the_same_way():
    with pytest.raises(ConfigError, match="--set value .* key 'lr' is given twice"):
        apply_overrides({}, ["optim={lr: 1, lr: 2}"])
    assert apply_overrides({}, ["optim={lr: 1}"]) == {"optim": {"lr": 1}}


def test_no_module_parses_yaml_but_through_the_strict_loader():
    readers = re.compile(r"yaml\.(safe_load|load|full_load|unsafe_load|load_all|safe_load_all)\(")
    found = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if readers.search(p.read_text())]
    assert found == ["core/config.py"]
