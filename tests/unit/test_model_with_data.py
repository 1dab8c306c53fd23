"""The model config that pretraining builds once the data is read (the preset, the data's vocabulary and special ids,
the model fields set): a field set that the data's ids do not fit is refused blaming the override, the API's
`overrides` or the file that set it, as the config's own shape checks do, never the preset."""
from __future__ import annotations

import sys

import pytest
import yaml

from conftest import run_command
from encoderlab import api
from encoderlab.core.errors import EncoderlabError
from encoderlab.data import packing


def write_config(folder, packed, **model) -> str:
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump({"name": "r", "out_dir": str(folder / "runs"), "data": {"path": str(packed)},
                                    "model": {"preset": "micro", **model},
                                    "train": {"steps": 20_000, "global_batch": 2}}))
    return str(path)


def test_an_override_the_data_does_not_fit_is_blamed_on_the_command_line(tmp_path, monkeypatch, capsys, packed_dir):
    tokenizer = packing.read_meta(packed_dir)["tokenizer"]
    top = max(tokenizer[k] for k in ("bos_id", "eos_id", "pad_id", "mask_id"))
    config = write_config(tmp_path, packed_dir)
    code, out, err = run_command(monkeypatch, capsys, "pretrain", config, "--set", "model.vocab_size=2", "--dry-run")
    assert code == 2 and out == ""
    assert err.startswith("error: --set model.vocab_size=2: model.vocab_size: with preset 'micro' and the data's "
                          f"tokenizer ({tokenizer['vocab_size']} tokens), ")
    assert "is outside the vocabulary (vocab_size=2)" in err and len(err.splitlines()) == 1
    code, out, err = run_command(monkeypatch, capsys, "pretrain", config, "--set", "model.mask_token_id=9000",
                                 "--dry-run")
    assert (code, err) == (2, "error: --set model.mask_token_id=9000: model.mask_token_id: with preset 'micro' and "
                              f"the data's tokenizer ({tokenizer['vocab_size']} tokens), mask_token_id=9000 is outside "
                              f"the vocabulary (vocab_size={tokenizer['vocab_size']})\n")
    assert top < tokenizer["vocab_size"]


def test_a_field_the_file_set_is_blamed_on_the_file(tmp_path, monkeypatch, capsys, packed_dir):
    config = write_config(tmp_path, packed_dir, pad_token_id=9000)
    code, _, err = run_command(monkeypatch, capsys, "pretrain", config, "--dry-run")
    assert code == 2
    assert err.startswith(f"error: {config}: model.pad_token_id: with preset 'micro' and the data's tokenizer ")


def test_from_the_python_api_the_overrides_argument_is_blamed(tmp_path, packed_dir):
    settings = yaml.safe_load(open(write_config(tmp_path, packed_dir)))
    with pytest.raises(EncoderlabError, match=r"^overrides=\{\"model\.vocab_size\": 2\}: model\.vocab_size: with "
                                              r"preset 'micro' and the data's tokenizer \(320 tokens\), "):
        api.pretrain(settings, {"model.vocab_size": 2})


def test_a_vocabulary_set_below_the_data_ids_is_blamed_on_its_override(tmp_path, monkeypatch, capsys, packed_dir):
    """Every special id fits, but the data's tokens go past the vocabulary set: the refusal named
    model.vocab_size but not the override that set it."""
    top = packing.max_token_id(packing.read_meta(packed_dir))
    config = write_config(tmp_path, packed_dir)
    code, _, err = run_command(monkeypatch, capsys, "pretrain", config, "--set", f"model.vocab_size={top}",
                               "--dry-run")
    assert code == 2
    assert err.startswith(f"error: --set model.vocab_size={top}: model.vocab_size: the data's token ids go up to "
                          f"{top} but the model's vocabulary has {top} ids: use at least {top + 1}")
    code, _, err = run_command(monkeypatch, capsys, "pretrain", write_config(tmp_path, packed_dir, vocab_size=top),
                               "--dry-run")
    assert err.startswith(f"error: {config}: model.vocab_size: the data's token ids go up to {top}")


def test_a_batch_that_does_not_split_is_blamed_on_what_set_it(tmp_path, monkeypatch, capsys, packed_dir):
    """The checks made once the data is read (check_compatible) named the field but not the override or file."""
    config = write_config(tmp_path, packed_dir)
    code, out, err = run_command(monkeypatch, capsys, "pretrain", config, "--set", "train.global_batch=null", "--set",
                                 "train.global_batch_tokens=512", "--set", "train.micro_batch=3", "--dry-run")
    assert (code, out, err) == (2, "", "error: --set train.micro_batch=3: train.micro_batch: train.micro_batch=3 does "
                                       "not divide the global batch\n")
    for key, value in {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    code, _, err = run_command(monkeypatch, capsys, "pretrain", config, "--dry-run")
    assert (code, err) == (2, f"error: {config}: train.global_batch: the global batch of 2 sequences cannot be split "
                              "evenly over 3 processes: use a multiple of 3\n")


def test_positions_set_below_the_data_windows_are_blamed_on_their_override(tmp_path, packed_dir):
    settings = yaml.safe_load(open(write_config(tmp_path, packed_dir)))
    with pytest.raises(EncoderlabError, match=r"^overrides=\{\"model\.max_position_embeddings\": 32\}: "
                                              r"model\.max_position_embeddings: the data's windows have 64 tokens "
                                              r"but the model's positions stop at 32"):
        api.pretrain(settings, {"model.max_position_embeddings": 32})


def test_a_section_set_by_a_key_inside_it_is_blamed_on_that_override(tmp_path, monkeypatch, capsys, packed_dir):
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb not installed: importing it fails
    code, _, err = run_command(monkeypatch, capsys, "pretrain", write_config(tmp_path, packed_dir), "--set",
                               "train.wandb.project=p", "--dry-run")
    assert code == 2
    assert err.startswith("error: --set train.wandb.project=p: train.wandb: {project: p} asks for Weights & Biases "
                          "logging, but wandb is not installed")
