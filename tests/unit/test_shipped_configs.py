"""A config path that does not exist but names a config shipped with encoderlab (`configs/pretrain/demo-tiny.yaml`
typed outside a clone, `studies/demo.yaml`, `demo-tiny`) is still refused, never swapped for the shipped file, and
the refusal says where the shipped one is and how to copy it."""
from __future__ import annotations

import re

import pytest

from encoderlab.core.config import ConfigError, load_config
from encoderlab.core.errors import CALLER
from encoderlab.core.io import CONFIGS
from encoderlab.finetuning.protocol import load_protocol
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.study.spec import load_study

SHIPPED = CONFIGS.resolve()


def _pretrain(path: str):
    return load_config(PretrainConfig, path, [], path, shipped="pretrain")


@pytest.mark.parametrize(("given", "shipped"), [
    ("configs/pretrain/demo-tiny.yaml", "pretrain/demo-tiny.yaml"),  # the docs' path, typed outside a clone
    ("demo-tiny", "pretrain/demo-tiny.yaml"),  # by name
    ("demo-tiny.yaml", "pretrain/demo-tiny.yaml"),
    ("paper/base.yaml", "pretrain/paper/base.yaml"),
])
def test_a_missing_pretraining_config_points_to_the_shipped_one(given, shipped, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        _pretrain(given)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"config file not found: {tmp_path / given} ({given!r} read from the current folder); ")
    assert (f"encoderlab ships configs/{shipped}: give its path, {SHIPPED / shipped}, or copy the shipped configs "
            f"here to edit them (cp -r {SHIPPED} .)") in message


def test_a_missing_study_or_protocol_points_to_its_own_kind(tmp_path, monkeypatch):
    """`demo` is a study and a protocol: each command is pointed to the one it reads."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=re.escape(f"encoderlab ships configs/studies/demo.yaml: give its path, "
                                                    f"{SHIPPED / 'studies' / 'demo.yaml'},")):
        load_study("studies/demo.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"encoderlab ships configs/eval/demo.yaml: give its path, "
                                                    f"{SHIPPED / 'eval' / 'demo.yaml'},")):
        load_protocol("demo", [])
    with pytest.raises(ConfigError, match=r"^config file not found: [^;]*$"):  # no pretraining config `demo`
        _pretrain("demo")
    with pytest.raises(ConfigError, match=r"^config file not found: [^;]*$"):  # a study is no pretraining config
        _pretrain("configs/studies/small.yaml")


def test_the_python_api_is_pointed_to_encoderlab_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    caller = CALLER.set("api")
    try:
        with pytest.raises(ConfigError, match=re.escape(
                'encoderlab ships configs/pretrain/demo-tiny.yaml: give encoderlab.CONFIGS / "pretrain/demo-tiny.yaml" '
                f"({SHIPPED / 'pretrain' / 'demo-tiny.yaml'})")):
            _pretrain("configs/pretrain/demo-tiny.yaml")
    finally:
        CALLER.reset(caller)


def test_a_missing_config_of_no_shipped_name_is_refused_as_before(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("mine.yaml", "configs/pretrain/mine.yaml"):
        with pytest.raises(ConfigError, match=r"^config file not found: [^;]*$"):
            _pretrain(given)
