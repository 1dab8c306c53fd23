"""A transformers folder whose tokenizer gives ids past its model's embeddings is refused where every reader of such
a folder starts (`transformers_config`): before its weights are read, and at a study's plan, not when a job that
fine-tunes it starts. A tokenizer with fewer ids than the embeddings (a matrix padded to a round size) is fine."""
from __future__ import annotations

import json
import re

import pytest
from test_transformers_encoders import broken, write_encoder

from conftest import run_command
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS
from encoderlab.runs.encoders import transformers_config

SAYS = "its tokenizer gives ids up to 37, but the model has 20 embeddings: the tokenizer is not this model's"


def test_a_tokenizer_past_the_embeddings_is_refused_with_the_config(tmp_path):
    folder = broken(tmp_path / "small-vocab", "small-vocab")
    with pytest.raises(EncoderlabError, match=re.escape(SAYS)):
        transformers_config(folder)
    padded = write_encoder(tmp_path / "padded", "bert", vocab_size=64)  # 38 tokens, 64 embeddings
    assert transformers_config(padded).vocab_size == 64


def test_a_study_plan_refuses_a_tokenizer_past_the_embeddings(tmp_path, monkeypatch, capsys):
    folder = broken(tmp_path / "small-vocab", "small-vocab")
    study = tmp_path / "s.yaml"
    study.write_text(json.dumps({"name": "s", "out_dir": str(tmp_path / "studies"), "checkpoints": {"big": str(folder)},
                                 "evaluation": {"protocol": str(CONFIGS / "eval" / "small-study.yaml"),
                                                "tasks": ["wiki-topic"]}}))
    code, out, err = run_command(monkeypatch, capsys, "study", "plan", study, home=tmp_path / "home")
    assert code == 2 and len(err.strip().splitlines()) == 1 and SAYS in err, err
    assert not (tmp_path / "studies").exists()
