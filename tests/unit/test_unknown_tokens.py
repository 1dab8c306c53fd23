"""A tokenizer that reads most of the corpus as its unknown token (a WordPiece of a few tokens, or one of another
language) packed without a word: `data prepare` counts the unknown token in the packed windows, records the share
in meta.json (`data inspect` shows it) and warns in one line above 1%. A byte-level BPE has no unknown token."""
from __future__ import annotations

import json
import warnings

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from conftest import run_command
from encoderlab import api
from encoderlab.core.errors import EncoderlabWarning
from encoderlab.data import packing

TEXT = "".join(f"the cat sat on the mat {i}\n\nthe dog sat on the log {i}\n\n" for i in range(40))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece(folder, words: list[str]):
    """A folder holding a WordPiece tokenizer.json of BERT's special tokens and `words`."""
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(SPECIALS + words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_a_tokenizer_that_reads_the_corpus_as_unknown_says_so(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--tokenizer", wordpiece(tmp_path / "wp", ["the"]), "--seq-len", "8",
                                 "--val-fraction", "0")
    assert code == 0, err
    meta = packing.read_meta(tmp_path / "d" / "packed")
    unknown = meta["unknown_tokens"]
    total = unknown["text_tokens"]
    assert unknown["token"] == "[UNK]" and unknown["id"] == 1 and 0.5 < unknown["share"] < 1
    assert unknown["count"] == round(unknown["share"] * total)
    [line] = [line for line in err.splitlines() if "unknown token" in line]
    assert line.endswith(f"warning: {unknown['share']:.1%} of the text's tokens ({unknown['count']:,} of "
                         f"{total:,}, BOS/EOS not counted) are the tokenizer's unknown token '[UNK]': that text is "
                         "lost to the model; a tokenizer made for this text leaves well under 1% (is it another "
                         "language's or script's, of other casing, or of too few tokens?)")
    assert "warning" not in out
    code, out, err = run_command(monkeypatch, capsys, "data", "inspect", tmp_path / "d" / "packed")
    assert code == 0, err
    assert f"unknown tokens: {unknown['share']:.1%} ('[UNK]')" in out
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--tokenizer", tmp_path / "wp", "--seq-len", "8", "--val-fraction", "0")
    assert "up to date" in err and "unknown token '[UNK]'" in err  # the data is still read so: said again


def test_a_tokenizer_that_covers_the_text_records_its_share_and_says_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    words = sorted(set(TEXT.split()))
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                               "--tokenizer", wordpiece(tmp_path / "wp", words), "--seq-len", "8")
    assert code == 0 and "unknown" not in err, err
    assert packing.read_meta(tmp_path / "d" / "packed")["unknown_tokens"] == {"token": "[UNK]", "id": 1, "count": 0,
                                                                               "text_tokens": 554, "share": 0.0}


def test_a_byte_level_bpe_has_no_unknown_token(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                               "--vocab-size", "270", "--seq-len", "8")
    assert code == 0 and "unknown" not in err, err
    assert "unknown_tokens" not in json.loads((tmp_path / "d" / "packed" / "meta.json").read_text())


def test_from_the_python_api_it_is_a_python_warning(tmp_path):
    (tmp_path / "c.txt").write_text(TEXT)
    said: list[str] = []
    with pytest.warns(EncoderlabWarning, match=r"^\d+\.\d% of the text's tokens .* unknown token '\[UNK\]'"):
        summary = api.prepare_data(tmp_path / "c.txt", tmp_path / "d", tokenizer=wordpiece(tmp_path / "wp", []),
                                   seq_len=8, log=said.append)
    assert summary["unknown_tokens"]["token"] == "[UNK]" and summary["unknown_tokens"]["share"] > 0.5
    assert not [line for line in said if "unknown" in line]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say of a tokenizer that covers the text
        api.prepare_data(tmp_path / "c.txt", tmp_path / "e", seq_len=8, vocab_size=270, log=said.append)


def test_the_join_of_shards_counts_and_says_it_as_one_process_does(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    wp = wordpiece(tmp_path / "wp", ["the", "cat"])
    with pytest.warns(EncoderlabWarning, match="unknown token"):
        whole = api.prepare_data(tmp_path / "c.txt", tmp_path / "one", tokenizer=wp, seq_len=8, log=lambda line: None)
    given = ("data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d", "--tokenizer", wp, "--seq-len", "8")
    for step in (("--shard", "0/2"), ("--shard", "1/2"), ("--join", "2")):
        code, _, err = run_command(monkeypatch, capsys, *given, *step)
        assert code == 0, err
    assert packing.read_meta(tmp_path / "d" / "packed")["unknown_tokens"] == whole["unknown_tokens"]
    assert "unknown token '[UNK]'" in err


def test_the_share_counts_the_texts_own_tokens_not_the_framing_specials(tmp_path, monkeypatch, capsys):
    # Every word unknown: the share is all of the text, however short its documents (BOS/EOS are not text).
    (tmp_path / "c.txt").write_text(TEXT)
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--tokenizer", wordpiece(tmp_path / "wp", []), "--seq-len", "8",
                                 "--val-fraction", "0", "--json")
    assert code == 0, err
    meta = packing.read_meta(tmp_path / "d" / "packed")
    unknown = meta["unknown_tokens"]
    assert unknown["share"] == 1.0 and unknown["count"] == unknown["text_tokens"]
    assert unknown["text_tokens"] < meta["splits"]["train"]["tokens"]  # the windows also hold BOS/EOS
    assert json.loads(out)["unknown_tokens"] == unknown
    assert (f"100.0% of the text's tokens ({unknown['count']:,} of {unknown['text_tokens']:,}, BOS/EOS not counted) "
            "are the tokenizer's unknown token '[UNK]'") in err
    code, out, err = run_command(monkeypatch, capsys, "data", "inspect", tmp_path / "d" / "packed", "--json")
    assert code == 0 and json.loads(out)["unknown_tokens"] == unknown, err
    code, out, err = run_command(monkeypatch, capsys, "data", "inspect", tmp_path / "d" / "packed")
    assert (f"unknown tokens: 100.0% ('[UNK]') of the text's tokens ({unknown['count']:,} of "
            f"{unknown['text_tokens']:,}, BOS/EOS not counted)") in out


def test_data_packed_before_text_tokens_were_counted_says_its_share_includes_bos_eos():
    meta = {"unknown_tokens": {"token": "[UNK]", "id": 1, "count": 420, "share": 0.75}}
    assert packing.unknown_note(meta).startswith("75.0% of the packed tokens (420, BOS/EOS included) are the "
                                                 "tokenizer's unknown token '[UNK]'")
