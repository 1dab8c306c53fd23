"""A corpus too small for `--vocab-size` trains a smaller BPE: `data prepare` says so in one warning line on stderr,
and everything after uses the size reached, never the one asked: the tokenizer's record, the packed data's
`meta.json` and the model config that pretraining builds from it."""
from __future__ import annotations

import json

from conftest import run_command
from encoderlab.core.config import validate
from encoderlab.data import packing
from encoderlab.data.prepare import PrepareOptions, prepare
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.setup import model_config

TEXT = "the cat sat on the mat\n\nthe dog sat on the log\n"  # a few dozen merges at most


def test_a_vocabulary_the_corpus_cannot_reach_is_said_and_the_reached_one_is_used(tmp_path):
    (tmp_path / "c.txt").write_text(TEXT)
    said: list[str] = []
    summary = prepare(str(tmp_path / "c.txt"), tmp_path / "d", PrepareOptions(vocab_size=8192, seq_len=8),
                      log=said.append)
    reached = summary["vocab_size"]
    assert 260 < reached < 8192
    [warning] = [line for line in said if line.startswith("warning:")]
    assert warning == (f"warning: the corpus gave a byte-level BPE of {reached} tokens, not the 8192 asked "
                       "(--vocab-size 8192): its text has no more pairs seen twice to merge; the tokenizer and a model "
                       f"pretrained on this data have {reached} (add text for more)")
    meta = packing.read_meta(tmp_path / "d" / "packed")
    assert meta["tokenizer"]["vocab_size"] == reached
    record = json.loads((tmp_path / "d" / "packed" / "tokenizer" / "encoderlab_tokenizer.json").read_text())
    assert record["origin"] == f"trained byte-level BPE, vocab {reached} (8192 asked)"
    cfg = validate(PretrainConfig, {"name": "r", "out_dir": str(tmp_path / "runs"),
                                    "data": {"path": str(tmp_path / "d" / "packed")}, "model": {"preset": "micro"},
                                    "train": {"steps": 20_000, "global_batch": 2}},
                   "test")
    assert model_config(cfg, meta["tokenizer"]).vocab_size == reached  # the micro preset's 8192 replaced
    assert packing.max_token_id(meta) < reached


def test_the_warning_is_one_line_on_stderr_and_not_an_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--seq-len", "8")
    assert code == 0, err
    [warning] = [line for line in err.splitlines() if "warning:" in line]
    assert "not the 8192 asked (--vocab-size 8192)" in warning and "warning:" not in out


def test_a_vocabulary_reached_says_nothing(tmp_path):
    (tmp_path / "c.txt").write_text(TEXT)
    said: list[str] = []
    prepare(str(tmp_path / "c.txt"), tmp_path / "d", PrepareOptions(vocab_size=262, seq_len=8), log=said.append)
    assert not [line for line in said if "warning" in line]
    record = json.loads((tmp_path / "d" / "packed" / "tokenizer" / "encoderlab_tokenizer.json").read_text())
    assert record["origin"] == "trained byte-level BPE, vocab 262"


def test_from_the_python_api_the_warning_is_a_python_warning_not_a_log_line(tmp_path, capsys):
    """`encoderlab.prepare_data` logs to stdout by default (`print`): the warning was one more progress line there,
    where a script's output goes and `log=lambda m: None` silenced it. It is a Python warning (EncoderlabWarning, a
    UserWarning, shown on stderr once per calling line, and filtered or raised as a script chooses), attributed to
    the caller's line."""
    import warnings

    import pytest

    import encoderlab

    (tmp_path / "c.txt").write_text(TEXT)
    said: list[str] = []
    with pytest.warns(encoderlab.EncoderlabWarning) as caught:
        summary = encoderlab.prepare_data(tmp_path / "c.txt", tmp_path / "d", seq_len=8, log=said.append)
    [warning] = [w for w in caught if issubclass(w.category, encoderlab.EncoderlabWarning)]
    assert str(warning.message).startswith(f"the corpus gave a byte-level BPE of {summary['vocab_size']} tokens, "
                                           "not the 8192 asked (vocab_size=8192)")
    assert warning.filename == __file__  # the caller's line, not encoderlab's
    assert not [line for line in said if "warning" in line] and "warning" not in capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("error", encoderlab.EncoderlabWarning)  # as a script may choose
        with pytest.raises(encoderlab.EncoderlabWarning):
            encoderlab.prepare_data(tmp_path / "c.txt", tmp_path / "e", seq_len=8, log=said.append)
