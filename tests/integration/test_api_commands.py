"""A refusal that tells the caller what to run first names it as that caller runs it: the command on the command
line (`encoderlab data prepare offline`), the function from the Python API (`encoderlab.prepare_data('offline')`),
never a command the Python caller is not running."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import encoderlab
from encoderlab.core.errors import CALLER, EncoderlabError

# What the command line's wording would put in an API refusal.
COMMANDS = ("encoderlab data prepare", "encoderlab study run", "encoderlab export", "encoderlab mteb",
            "encoderlab finetune", "encoderlab import-hf", " --")


@pytest.fixture
def as_api():
    """The caller as during a Python API call (core/arguments.py `checked` sets it), for a check reached below one."""
    token = CALLER.set("api")
    yield
    CALLER.reset(token)


def refusal(call: Callable[[], object]) -> str:
    with pytest.raises(EncoderlabError) as caught:
        call()
    said = str(caught.value)
    assert "\n" not in said and not any(command in said for command in COMMANDS), said
    return said


def test_prepare_is_named_as_each_caller_runs_it(as_api):
    from encoderlab.core.errors import prepare_command

    assert prepare_command("offline") == "encoderlab.prepare_data('offline')"
    assert prepare_command("SRC", Path("/d/x"), force=True) == "encoderlab.prepare_data(SRC, out='/d/x', force=True)"
    assert prepare_command("SRC", tokenizer="tok") == "encoderlab.prepare_data(SRC, tokenizer='tok')"
    CALLER.set("cli")
    assert prepare_command("SRC", Path("/d/x"), force=True) == "encoderlab data prepare SRC --out /d/x --force"
    assert prepare_command("offline") == "encoderlab data prepare offline"


def test_data_not_prepared_names_prepare_data(tmp_path, monkeypatch):
    from conftest import tiny_checkpoint

    from encoderlab.core.io import CONFIGS

    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))
    config = CONFIGS / "pretrain" / "demo-tiny.yaml"
    said = refusal(lambda: encoderlab.pretrain(config, log=lambda m: None))
    assert said.endswith("create it with `encoderlab.prepare_data('offline')`")
    said = refusal(lambda: encoderlab.pretrain(config, {"data.path": str(tmp_path / "d")}, log=lambda m: None))
    assert said.endswith(f"create it with `encoderlab.prepare_data(SRC, out='{tmp_path / 'd'}')`")
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    for task in ("offline", "rt-polarity"):
        said = refusal(lambda t=task: encoderlab.sweep(checkpoint, [t], out=tmp_path / "evals", log=lambda m: None))
        assert "`encoderlab.prepare_data('offline')`" in said


def test_damaged_packed_data_names_prepare_data(tmp_path, packed_dir):
    from encoderlab.core.io import CONFIGS

    packed = shutil.copytree(packed_dir, tmp_path / "packed")
    shard = next(p for p in packed.rglob("*.bin"))
    shard.write_bytes(shard.read_bytes()[:-2])
    said = refusal(lambda: encoderlab.pretrain(CONFIGS / "pretrain" / "demo-tiny.yaml", {
        "data.path": str(packed), "out_dir": str(tmp_path / "runs")}, log=lambda m: None))
    assert said.endswith("prepare the data again (`encoderlab.prepare_data(SOURCE, out=FOLDER, force=True)`)")


def test_prepare_again_of_damaged_shards_names_prepare_data(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"the cat sat on mat number {i} while dogs ran" for i in range(300)))
    out = tmp_path / "data"
    encoderlab.prepare_data(corpus, out, vocab_size=300, seq_len=16, log=lambda m: None)
    shard = next((out / "packed").rglob("*.bin"))
    shard.write_bytes(b"\0" * shard.stat().st_size)
    said = refusal(lambda: encoderlab.prepare_data(corpus, out, vocab_size=300, seq_len=16, log=lambda m: None))
    assert said.endswith(f"pack them again with `encoderlab.prepare_data('{corpus}', out='{out}', force=True)`")


def test_checks_below_the_api_name_its_functions(tmp_path, as_api):
    from encoderlab.data import packing
    from encoderlab.data.tokenizer import train_bpe
    from encoderlab.pretraining import setup
    from encoderlab.data.hub_access import _hub_unreachable
    from encoderlab.data.offline.taskfiles import read_task
    from encoderlab.hub import mteb_eval
    from encoderlab.runs.checkpoint import load_model
    from encoderlab.study import grid, imported, migrate_plan
    from encoderlab.study.runner import check_succeeded

    assert "create one with `encoderlab.prepare_data(SRC)`" in refusal(lambda: packing.read_meta(tmp_path))
    said = str(_hub_unreachable("org/set", "no network"))
    assert said.endswith("as source, or run `encoderlab.prepare_data('offline')`"), said
    assert "build the offline suite with `encoderlab.prepare_data('offline')`" in refusal(
        lambda: read_task(tmp_path, "nope"))
    said = refusal(lambda: imported.corpus_file(str(tmp_path)))
    assert f"a folder that `encoderlab.prepare_data(SRC, out='{tmp_path}')` wrote" in said
    said = refusal(lambda: migrate_plan.read(tmp_path))
    assert "give the folder that `encoderlab.run_study(...)` returned" in said
    (tmp_path / "plan.json").write_text("")
    assert "run the study again (`encoderlab.run_study(STUDY_FILE)`)" in refusal(lambda: migrate_plan.read(tmp_path))
    result = {"failed": ["j"], "logs": {"j": "j.log"}, "skipped": [], "jobs": 1}
    assert "`encoderlab.run_study` runs them again" in refusal(lambda: check_succeeded(result, "s"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.json").write_text("{}")
    (ckpt / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert "export it (encoderlab.export(CKPT, OUT, kind='masked-lm'))" in refusal(lambda: load_model(ckpt))
    shape = SimpleNamespace(data_shape=None)
    said = refusal(lambda: grid._data_shape(shape, SimpleNamespace(data=SimpleNamespace(path=str(tmp_path / "p")))))
    assert f"prepare it (`encoderlab.prepare_data(SRC, out='{tmp_path / 'p'}')`) or add data_shape" in said
    ours, theirs = (train_bpe([text] * 50, 280) for text in ("the cat sat on a mat", "dogs ran across fields"))
    ours.tokenizer.save(str(tmp_path / "tokenizer.json"))
    said = refusal(lambda: setup._same_vocabulary(tmp_path / "tokenizer.json", theirs.tokenizer, tmp_path,
                                                  tmp_path / "tok", "model's"))
    assert f"(`encoderlab.prepare_data(SRC, tokenizer='{tmp_path / 'tok'}')`)" in said
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(__import__("sys").modules, "mteb", None)  # as if not installed
        assert refusal(mteb_eval.check_installed).startswith("encoderlab.mteb needs the mteb package")


def test_an_encoder_given_to_import_hf_is_sent_to_the_api_functions(tmp_path):
    from test_transformers_encoders import write_encoder

    folder = write_encoder(tmp_path / "bert", "bert")
    said = refusal(lambda: encoderlab.import_hf(folder, tmp_path / "out"))
    assert (f"(encoderlab.finetune/sweep('{folder}', TASK, ...), encoderlab.mteb('{folder}', TASKS, OUT), "
            f"init.from_weights: {folder} to pretrain it further); import_hf is for the families") in said
    assert not (tmp_path / "out").exists()


def test_an_offline_task_not_prepared_names_the_api_function(as_api, tmp_path):
    from encoderlab.tasks import task_identity

    said = refusal(lambda: task_identity("wiki-topic"))
    assert said.endswith("prepare the suite with `encoderlab.prepare_data('offline')`"), said
    root = tmp_path / "suite" / "tasks"
    root.mkdir(parents=True)
    said = refusal(lambda: task_identity("imdb-long", root=root))
    assert said.endswith(f"`encoderlab.prepare_data('offline', out={str(root.parent)!r})`"), said
