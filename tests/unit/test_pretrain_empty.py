"""An empty pretraining config (saved before it was written, or cut short) was refused as `train: Field required`,
which says nothing of the file; it is refused as empty, as a protocol or a study file is (core/empty_config.py)."""
from __future__ import annotations

import re

import pytest

import encoderlab
from conftest import run_command
from encoderlab.core.config import ConfigError
from encoderlab.core.io import CONFIGS

SAYS = (f"is empty: it holds no setting; write its settings (base: {CONFIGS / 'pretrain' / 'cpu-study.yaml'} and "
        "the keys to change)")


@pytest.mark.parametrize("text", ["", "\n\n", "# train: {steps: 8}\n", "---\n", "{}\n"])
def test_an_empty_pretraining_config_is_refused_as_empty(tmp_path, monkeypatch, capsys, text):
    (tmp_path / "run.yaml").write_text(text)
    code, out, err = run_command(monkeypatch, capsys, "pretrain", tmp_path / "run.yaml", home=tmp_path / "home")
    assert code == 2 and out == "" and err == f"error: pretraining config {tmp_path / 'run.yaml'} {SAYS}\n", err
    with pytest.raises(ConfigError, match=rf"^pretraining config {re.escape(str(tmp_path / 'run.yaml'))} "
                                          rf"{re.escape(SAYS)}$"):
        encoderlab.pretrain(tmp_path / "run.yaml")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text, held", [("[]\n", "list"), ('""\n', "str"), ("false\n", "bool"), ("0\n", "int")])
def test_a_config_of_a_false_value_is_refused_as_no_mapping(tmp_path, monkeypatch, capsys, text, held):
    """`[]` (or `""`, `false`, `0`) was read as `{}`: a protocol ran every default (6 LRs x 5 seeds of 1000 steps)
    no one chose, a pretraining config was refused as `train: Field required`. It holds no mapping: said so."""
    from encoderlab.finetuning.protocol import load_protocol
    from encoderlab.study.spec import load_study
    path = tmp_path / "run.yaml"
    path.write_text(text)
    says = f"{path} must hold a mapping of sections at the top level, not {held}"
    code, out, err = run_command(monkeypatch, capsys, "pretrain", path, home=tmp_path / "home")
    assert code == 2 and out == "" and err == f"error: {says}\n", err
    for load in (lambda p: load_protocol(p, []), load_study):
        with pytest.raises(ConfigError, match=rf"^{re.escape(says)}$"):
            load(path)
    assert not (tmp_path / "runs").exists()
