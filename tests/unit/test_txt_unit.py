"""A .txt corpus with one document a line and no blank line read as paragraphs became one document without a word
(no validation window, every line attending to every other); the Python API could not say `txt_unit` at all."""
from __future__ import annotations

import json
import warnings

import pytest

import encoderlab
from encoderlab.core.errors import EncoderlabError, EncoderlabWarning

LINES = [f"Document number {i} talks about the harbour, the hills and the winter sky." for i in range(150)]


def _prepare(tmp_path, text: str, **kwargs) -> tuple[dict, list[warnings.WarningMessage]]:
    (tmp_path / "lines.txt").write_text(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        summary = encoderlab.prepare_data(tmp_path / "lines.txt", tmp_path / "data", vocab_size=300, seq_len=32,
                                          log=lambda m: None, **kwargs)
    return summary, [w for w in seen if issubclass(w.category, EncoderlabWarning)]


def test_a_txt_without_blank_lines_read_as_one_paragraph_is_warned(tmp_path):
    summary, seen = _prepare(tmp_path, "\n".join(LINES) + "\n")
    assert summary["corpus"]["documents"] == 1
    assert [str(w.message) for w in seen] == [
        "lines.txt: its 150 lines hold no blank line, so they were read as one document (txt_unit='paragraph'); "
        "if each line is a document, give txt_unit='line'"]


def test_txt_unit_line_makes_a_document_of_each_line(tmp_path):
    summary, seen = _prepare(tmp_path, "\n".join(LINES) + "\n", txt_unit="line")
    assert summary["corpus"]["documents"] == 150 and not seen
    first = json.loads((tmp_path / "data" / "corpus" / "documents.jsonl").read_text().splitlines()[0])
    assert first["text"] == LINES[0]


def test_paragraphs_are_not_warned(tmp_path):
    summary, seen = _prepare(tmp_path, "\n\n".join(LINES) + "\n")
    assert summary["corpus"]["documents"] == 150 and not seen


def test_an_unknown_txt_unit_is_refused_before_any_work(tmp_path):
    with pytest.raises(EncoderlabError, match=r"^txt_unit='sentence' is not allowed; choose one of file, paragraph, "
                                              r"line$"):
        _prepare(tmp_path, "a text\n", txt_unit="sentence")
    assert not (tmp_path / "data").exists()


def test_several_such_files_are_named_in_one_warning(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text("\n".join(LINES) + "\n")
    (corpus / "c.txt").write_text("\n\n".join(LINES) + "\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        encoderlab.prepare_data(corpus, tmp_path / "data", vocab_size=300, seq_len=32, log=lambda m: None)
    assert [str(w.message) for w in seen if issubclass(w.category, EncoderlabWarning)] == [
        "2 .txt files (a.txt, b.txt) hold 100+ lines and no blank line, so they were read as one document each "
        "(txt_unit='paragraph'); if each line is a document, give txt_unit='line'"]
