"""`data prepare` ends naming the command to run next, as it can be pasted where the user is: pretraining on the
data (the README's path), or, after a shard, the join."""
from __future__ import annotations

import shlex

from encoderlab.cli.data import _after_prepare
from encoderlab.core.io import CONFIGS


def test_the_next_command_names_a_config_that_exists_from_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside a clone: the shipped config's path in the package
    demo = CONFIGS / "pretrain" / "demo-tiny.yaml"
    offline = {"packed": str(tmp_path / "home" / "data" / "offline" / "packed")}
    assert _after_prepare("offline", None, offline, None) == (
        f"encoderlab pretrain {shlex.quote(str(demo))} (data.path: offline is this data), or encoderlab demo (the "
        "demo study)")
    mini = CONFIGS / "pretrain" / "mini-mlm40.yaml"
    mine = {"packed": "data/my corpus/packed"}
    assert _after_prepare("c.jsonl", tmp_path / "d", mine, None) == (
        f"encoderlab pretrain {shlex.quote(str(mini))} --set 'data.path=data/my corpus/packed'")
    assert _after_prepare("offline", tmp_path / "d", mine, None) == (
        f"encoderlab pretrain {shlex.quote(str(demo))} --set 'data.path=data/my corpus/packed'")
    (tmp_path / "configs" / "pretrain").mkdir(parents=True)  # a clone's root, or the configs copied here
    (tmp_path / "configs" / "pretrain" / "demo-tiny.yaml").write_text("")
    assert _after_prepare("offline", None, offline, None).startswith(
        "encoderlab pretrain configs/pretrain/demo-tiny.yaml (")


def test_after_a_shard_the_join_is_next():
    shard = {"shard": "3/8", "root": "/data/out", "parts": "/data/out/parts"}
    assert _after_prepare("/src/*.parquet", None, shard, "tok.json") == (
        "once all 8 shards have run, encoderlab data prepare '/src/*.parquet' --out /data/out --tokenizer tok.json "
        "--join 8")
