"""A checkpoint whose tokenizer makes ids past its model's embeddings (a model_config.json of a smaller vocab_size,
or a larger tokenizer put beside the weights) is refused in one line, naming both sizes, before any work: it used to
fail deep in a fine-tuning run (`IndexError: index out of range in self`) and export a model that cannot read them."""
from __future__ import annotations

import random

import pytest
from conftest import WORDS, run_command, write_classification_task

import encoderlab
from encoderlab.data.tokenizer import train_bpe


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    """A 300-token tokenizer beside a model of 256 embeddings."""
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM
    from encoderlab.runs.checkpoint import save_weights_only

    tok = train_bpe([" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(200)], 300)
    assert tok.vocab_size > 256
    cfg = ModelConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                      mask_token_id=tok.mask_id)
    model = TransformerLM(cfg)
    model.init_weights(seed=5)
    folder = tmp_path_factory.mktemp("run") / "step-0000003"
    save_weights_only(folder, model.state_dict(), cfg, tok,
                      {"step": 3, "reason": "final", "objective": "mlm40", "total_steps": 3})
    return folder, tok.vocab_size


def said(path, tokens: int) -> str:
    return (f"{path}: its tokenizer has {tokens} tokens but its model's vocab_size is 256 (model_config.json): the "
            "model cannot read ids from 256 up; pair the model with the tokenizer it was trained with")


@pytest.mark.parametrize("command", [["sweep"], ["finetune", "--lr", "1e-3"]])
def test_a_sweep_or_finetune_is_refused_before_any_run(tmp_path, monkeypatch, capsys, mismatched, command):
    folder, tokens = mismatched
    task = write_classification_task(tmp_path / "task")
    code, out, err = run_command(monkeypatch, capsys, command[0], folder, task, *command[1:], "--out",
                                 tmp_path / "evals", home=tmp_path / "home")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and said(folder, tokens) in err, err
    assert not list((tmp_path / "evals").rglob("*.json"))  # no record: nothing ran


def test_an_export_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys, mismatched):
    folder, tokens = mismatched
    code, out, err = run_command(monkeypatch, capsys, "export", folder, "--out", tmp_path / "hf",
                                 home=tmp_path / "home")
    assert code == 2 and len(err.strip().splitlines()) == 1 and said(folder, tokens) in err, err
    assert not (tmp_path / "hf").exists()


def test_the_python_api_refuses_it_as_an_encoderlab_error(mismatched):
    folder, tokens = mismatched
    with pytest.raises(encoderlab.EncoderlabError, match="its tokenizer has 300 tokens but its model's vocab_size"):
        encoderlab.load(folder)
