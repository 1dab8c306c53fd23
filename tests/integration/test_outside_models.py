"""Models from outside encoderlab given where they do not belong, or in a layout of their own: tiny random
transformers encoders (test_transformers_encoders.write_encoder) given to import-hf are sent to the commands that
read them as they are, in one line."""
from __future__ import annotations

import pytest
from test_transformers_encoders import write_encoder

from conftest import run_command


def _one_line(monkeypatch, capsys, *args) -> str:
    code, out, err = run_command(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("model_type", ["bert", "roberta", "deberta-v2", "modernbert"])
def test_import_hf_sends_an_encoder_read_as_it_is_to_finetune(tmp_path, monkeypatch, capsys, model_type):
    """import-hf is for the families encoderlab's backbone computes; a BERT-like folder is fine-tuned, swept and
    scored by MTEB as it is, so the refusal names those commands rather than listing the families alone."""
    folder = write_encoder(tmp_path / model_type, model_type)
    err = _one_line(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out")
    assert f"{folder}: a {model_type} encoder needs no import" in err
    assert f"encoderlab finetune/sweep {folder} TASK" in err and f"encoderlab mteb {folder}" in err
    assert "import-hf is for the families encoderlab computes with its own backbone (llama, " in err
    assert not (tmp_path / "out").exists()


def test_import_hf_sends_a_named_encoder_to_finetune_without_fetching_it(tmp_path, monkeypatch, capsys):
    from encoderlab.data import wheels

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(wheels, "fetch", lambda *a, **k: pytest.fail("the wheel is fetched"))
    err = _one_line(monkeypatch, capsys, "import-hf", "minilm-l6", "--out", tmp_path / "out")
    assert "minilm-l6: the named encoder minilm-l6 needs no import" in err and "finetune/sweep minilm-l6" in err
