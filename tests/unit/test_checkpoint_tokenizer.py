"""`data prepare --tokenizer` of an encoderlab checkpoint or run folder packs with the tokenizer that checkpoint
holds, as transformers' AutoTokenizer takes a model folder: the data is for continuing that model."""
from __future__ import annotations

import random

import pytest
from conftest import WORDS, run_command, tiny_checkpoint

from encoderlab.data import packing
from encoderlab.runs.checkpoint import set_latest

TEXT = "\n\n".join(" ".join(random.Random(i).choices(WORDS, k=30)) for i in range(40))


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    checkpoint = tiny_checkpoint(run / "checkpoints" / "step-0000003")
    set_latest(run, checkpoint)
    return run


@pytest.mark.parametrize("given", ["run", "checkpoint", "tokenizer"])
def test_a_checkpoints_tokenizer_packs_the_data(tmp_path, monkeypatch, capsys, run_folder, given):
    checkpoint = run_folder / "checkpoints" / "step-0000003"
    folder = {"run": run_folder, "checkpoint": checkpoint, "tokenizer": checkpoint / "tokenizer"}[given]
    (tmp_path / "c.txt").write_text(TEXT)
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--tokenizer", folder, "--seq-len", "16", "--val-fraction", "0")
    assert code == 0, err
    # the data is for continuing that model, as for a transformers model's tokenizer (its own folder for a tokenizer/
    # given), with the model's shapes, which cpt-encoder.yaml does not set
    continued = checkpoint if given == "tokenizer" else folder
    assert f"cpt-encoder.yaml --set data.path={tmp_path / 'd' / 'packed'} --set init.from_weights={continued} --set " \
           "model.hidden_size=" in out, out
    assert f"tokenizer {checkpoint / 'tokenizer'}: " in err  # says which tokenizer it used
    packed = tmp_path / "d" / "packed" / "tokenizer" / "tokenizer.json"
    assert packed.read_bytes() == (checkpoint / "tokenizer" / "tokenizer.json").read_bytes()
    assert packing.read_meta(tmp_path / "d" / "packed")["splits"]["train"]["tokens"] > 0


def test_a_run_folder_whose_latest_is_gone_is_refused_naming_it(tmp_path, monkeypatch, capsys, run_folder):
    (tmp_path / "c.txt").write_text(TEXT)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "LATEST").write_text("step-0000009\n")
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                               "--tokenizer", tmp_path / "run", "--seq-len", "16")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{tmp_path / 'run' / 'LATEST'} names step-0000009, which is missing" in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("folder, said", [
    ("empty", "is an empty folder: give a tokenizer.json or a folder holding a tokenizer"),
    ("run", "is an encoderlab run without a LATEST checkpoint: give one of its checkpoint folders "
            "(checkpoints/step-N, each holds its tokenizer/), or pretrain until one is saved")])
def test_a_folder_without_a_tokenizer_is_refused_saying_what_it_is(tmp_path, monkeypatch, capsys, folder, said):
    """transformers' own reason for these read `Couldn't instantiate the backend tokenizer from one of: ` and
    called a run folder a model without a tokenizer.json."""
    (tmp_path / "c.txt").write_text(TEXT)
    (tmp_path / "f").mkdir()
    if folder == "run":  # a run stopped before its first checkpoint
        (tmp_path / "f" / "checkpoints").mkdir()
        (tmp_path / "f" / "metrics.jsonl").write_text("")
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                               "--tokenizer", tmp_path / "f", "--seq-len", "16")
    assert (code, err.strip().splitlines()) == (2, [f"error: {tmp_path / 'f'}: {said}"]), err
    assert not (tmp_path / "d").exists()
