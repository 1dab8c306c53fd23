"""How a parameter count is written in the command line's summaries, the model card and an Encoder's line."""
from __future__ import annotations

import pytest

from encoderlab.cli.commands import _render_run
from encoderlab.core.counts import parameters_text


@pytest.mark.parametrize(("count", "text"), [(12, "12"), (999, "999"), (1_000, "1.0K"), (41_600, "41.6K"),
                                             (1_000_000, "1.0M"), (134_515_008, "134.5M"), (1_234_000_000, "1.2B"),
                                             (999_960, "1.0M"), (999_960_000, "1.0B"),  # not 1000.0K, 1000.0M
                                             (950_001, "950.0K")])
def test_a_count_keeps_its_digits_at_every_size(count, text):
    assert parameters_text(count) == text


def test_the_pretraining_header_of_a_tiny_model_is_not_zero(capsys):
    """A 42K-parameter model (a tiny transformers folder) read `0.0M parameters (0.0M without embeddings)`."""
    model = {"model_type": "roberta", "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
             "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 600}
    _render_run({"model": model, "parameters": 41_600, "non_embedding_parameters": 17_000, "phases": [],
                 "stable_checkpoint_step": 1, "data": "d", "train_windows": 1, "seq_len": 8, "tokens_per_step": 8,
                 "total_tokens": 8, "epochs": 1, "dtype": "fp32", "dtype_asked": "fp32", "device": "cpu",
                 "dtype_note": "", "source_notes": [], "run_dir": "r"})
    assert "41.6K parameters (17.0K without embeddings)" in capsys.readouterr().out
