"""A checkpoint's state.json read through runs/migrate_checkpoint.py: one written before formats had versions reads as
the checks of its time read it, a newer format is refused in one line, the current one round-trips."""
from __future__ import annotations

import json

import pytest
import torch

from encoderlab.core.errors import EncoderlabError
from encoderlab.model.config import ModelConfig
from encoderlab.runs import checkpoint, migrate_checkpoint

CONFIG = ModelConfig(vocab_size=8, hidden_size=4, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                     num_key_value_heads=1)


@pytest.fixture
def written(tmp_path):
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    return checkpoint.save_weights_only(tmp_path / "ckpt", {"w": torch.ones(2)}, CONFIG, tokenizer,
                                        {"step": 7, "reason": "imported"})


def rewrite_state(folder, change) -> None:
    state = json.loads((folder / "state.json").read_text())
    change(state)
    (folder / "state.json").write_text(json.dumps(state))


def test_a_current_state_round_trips(written):
    state = checkpoint.load_state(written)
    assert state == {"step": 7, "reason": "imported", "manifest": checkpoint.MANIFEST,
                     "format_version": migrate_checkpoint.FORMAT, **dict.fromkeys(migrate_checkpoint.TRAINING)}


def test_a_state_of_format_0_reads_as_its_checks_read_it(written):
    """Written before checksums, configs, LR factors and data fingerprints were recorded: accepted unverified, every
    field it lacks None (nothing to compare with)."""
    (written / checkpoint.MANIFEST).unlink()
    rewrite_state(written, lambda s: [s.pop(k) for k in ("manifest", "format_version")])
    (written / "model.safetensors").write_bytes(b"changed")  # unverified: nothing says what it was
    checkpoint.verify(written)
    state = checkpoint.load_state(written)
    assert state == {"step": 7, "reason": "imported", "manifest": None, "format_version": 1,
                     **dict.fromkeys(migrate_checkpoint.TRAINING)}
    rewrite_state(written, lambda s: s.update(manifest=False))  # what some older writers said
    assert checkpoint.load_state(written)["manifest"] is None


def test_a_current_state_without_its_manifest_is_refused(written):
    (written / checkpoint.MANIFEST).unlink()
    with pytest.raises(EncoderlabError, match=r"checksums.json is missing \(its writer wrote one\)"):
        checkpoint.verify(written)


def test_a_newer_state_is_refused_naming_it(written):
    rewrite_state(written, lambda s: s.update(format_version=2))
    checkpoint.write_manifest(written)
    with pytest.raises(EncoderlabError, match=rf"^{written / 'state.json'} has format_version 2, newer than 1, "):
        checkpoint.load_state(written)
    (written / checkpoint.MANIFEST).unlink()
    with pytest.raises(EncoderlabError, match=r"has format_version 2, newer than 1"):
        checkpoint.verify(written)


def test_a_dumped_config_of_a_schedule_without_decay_drops_the_default_older_dumps_wrote():
    older = {"name": "r", "lr_schedule": {"kind": "constant", "warmup_steps": 3, "decay_steps": 2000}}
    assert migrate_checkpoint.run_config(older) == {"name": "r", "lr_schedule": {"kind": "constant",
                                                                                  "warmup_steps": 3}}
    chosen = {"lr_schedule": {"kind": "wsd", "decay_steps": 2000}}
    assert migrate_checkpoint.run_config(chosen) == chosen
    state = migrate_checkpoint.upgrade_state({"step": 1, "config": older}, "state.json")
    assert "decay_steps" not in state["config"]["lr_schedule"] and state["manifest"] is None
