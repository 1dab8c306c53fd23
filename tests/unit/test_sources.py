"""Text sources: every format, the ids and order they produce, and the error each user mistake gets."""
from __future__ import annotations

import gzip
import json
import socket
import sys
import types
from pathlib import Path

import pytest

from encoderlab.core.errors import DataError
from encoderlab.data import hub_access, sources
from encoderlab.data.documents import Document
from encoderlab.data.sources import SUPPORTED_SUFFIXES, describe_spec, iter_documents

BAD_UTF8 = b"caf\xe9 au lait"  # latin-1 bytes, the most common way a "text" file is not UTF-8


def docs(spec: Path | str, **kwargs) -> list[tuple[str, str, str]]:
    return [(d.id, d.source, d.text) for d in iter_documents(str(spec), **kwargs)]


def texts(spec: Path | str, **kwargs) -> list[str]:
    return [d.text for d in iter_documents(str(spec), **kwargs)]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_parquet(path: Path, columns: dict[str, list]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


# ---------------------------------------------------------------- formats


def test_txt_paragraphs_are_split_on_blank_lines(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"\xef\xbb\xbffirst para\nstill first\r\n\r\n\n  \nsecond\n\n\n   \n")
    assert docs(f) == [
        ("a.txt:0", "local:a.txt", "first para\nstill first"),
        ("a.txt:1", "local:a.txt", "second"),
    ]


def test_txt_lines_use_line_numbers_and_skip_blank_lines(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("one\n\n  two  \n   \nthree", encoding="utf-8")
    assert docs(f, txt_unit="line") == [
        ("a.txt:1", "local:a.txt", "one"),
        ("a.txt:3", "local:a.txt", "two"),
        ("a.txt:5", "local:a.txt", "three"),
    ]


def test_txt_file_unit_keeps_the_whole_file(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("\npara one\n\npara two\n", encoding="utf-8")
    assert docs(f, txt_unit="file") == [("a.txt:0", "local:a.txt", "para one\n\npara two")]


def test_jsonl_reads_the_text_column_by_line_number(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text(
        json.dumps({"text": " hello ", "id": 7}) + "\n\n"
        + json.dumps({"text": "   "}) + "\n"
        + json.dumps({"text": None}) + "\n"
        + json.dumps({"text": "wörld\nline two"}) + "\n",
        encoding="utf-8",
    )
    assert docs(f) == [
        ("c.jsonl:1", "local:c.jsonl", "hello"),
        ("c.jsonl:5", "local:c.jsonl", "wörld\nline two"),
    ]


def test_json_suffix_is_read_as_json_lines(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "c.json", [{"text": "a"}, {"text": "b"}])
    assert docs(f) == [("c.json:1", "local:c.json", "a"), ("c.json:2", "local:c.json", "b")]


def test_custom_text_column(tmp_path: Path) -> None:
    j = write_jsonl(tmp_path / "c.jsonl", [{"body": "from jsonl", "text": "not this"}])
    c = tmp_path / "c.csv"
    c.write_text("text,body\nnot this,from csv\n", encoding="utf-8")
    p = write_parquet(tmp_path / "c.parquet", {"text": ["not this"], "body": ["from parquet"]})
    got = [texts(x, text_column="body") for x in (j, c, p)]
    assert got == [["from jsonl"], ["from csv"], ["from parquet"]]


def test_parquet_streams_all_batches_and_skips_empty_and_null(tmp_path: Path) -> None:
    values = [f"doc {i}" for i in range(2500)]  # more than one 1024-row batch
    values[3], values[1500] = "  ", None
    f = write_parquet(tmp_path / "p.parquet", {"text": values, "n": list(range(2500))})
    got = list(iter_documents(str(f)))
    assert len(got) == 2498
    assert got[0] == Document("p.parquet:0", "local:p.parquet", "doc 0")
    assert got[3].id == "p.parquet:4" and got[-1] == Document("p.parquet:2499", "local:p.parquet", "doc 2499")
    assert "p.parquet:1500" not in {d.id for d in got}


def test_csv_with_quotes_multiline_fields_bom_and_a_huge_field(tmp_path: Path) -> None:
    huge = "x" * 300_000  # beyond the csv module's default 128 KiB field limit
    f = tmp_path / "t.csv"
    f.write_bytes(
        b'\xef\xbb\xbfid,text\n1,"hello, world"\n\n2,"two\nlines"\n3,\n4,' + huge.encode() + b"\n"
    )
    assert docs(f) == [
        ("t.csv:0", "local:t.csv", "hello, world"),
        ("t.csv:1", "local:t.csv", "two\nlines"),
        ("t.csv:3", "local:t.csv", huge),
    ]


def test_tsv_uses_tabs(tmp_path: Path) -> None:
    f = tmp_path / "t.tsv"
    f.write_text("label\ttext\npos\tgood, very good\nneg\tbad\n", encoding="utf-8")
    assert docs(f) == [("t.tsv:0", "local:t.tsv", "good, very good"), ("t.tsv:1", "local:t.tsv", "bad")]


@pytest.mark.parametrize(
    ("name", "content"),
    [("a.txt.gz", b"alpha\n\nbeta\n"), ("a.jsonl.gz", b'{"text": "alpha"}\n{"text": "beta"}\n'),
     ("a.csv.gz", b"text\nalpha\nbeta\n")],
)  # fmt: skip
def test_gzip_files_are_decompressed(tmp_path: Path, name: str, content: bytes) -> None:
    f = tmp_path / name
    f.write_bytes(gzip.compress(content))
    got = list(iter_documents(str(f)))
    assert [d.text for d in got] == ["alpha", "beta"]
    assert got[0].source == f"local:{name}"


def test_directory_is_read_recursively_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "b" / "deep").mkdir(parents=True)
    (tmp_path / ".cache").mkdir()
    (tmp_path / "z.txt").write_text("z", encoding="utf-8")
    (tmp_path / "b" / "deep" / "y.txt").write_text("y", encoding="utf-8")
    (tmp_path / "b" / "x.txt").write_text("x", encoding="utf-8")
    write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}])
    (tmp_path / "README.md").write_text("not corpus", encoding="utf-8")
    (tmp_path / ".cache" / "junk.txt").write_text("hidden", encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("hidden", encoding="utf-8")
    assert docs(tmp_path) == [
        ("a.jsonl:1", "local:a.jsonl", "a"),
        ("b/deep/y.txt:0", "local:b/deep/y.txt", "y"),
        ("b/x.txt:0", "local:b/x.txt", "x"),
        ("z.txt:0", "local:z.txt", "z"),
    ]
    assert describe_spec(str(tmp_path)) == "4 local files (.jsonl, .txt)"


def test_glob_is_sorted_and_ids_are_relative_to_the_pattern_root(tmp_path: Path) -> None:
    for part in ("p2", "p1"):
        (tmp_path / part).mkdir()
        write_jsonl(tmp_path / part / "data.jsonl", [{"text": part}])
    write_jsonl(tmp_path / "p1" / "other.json", [{"text": "no"}])
    assert docs(tmp_path / "*" / "*.jsonl") == [
        ("p1/data.jsonl:1", "local:p1/data.jsonl", "p1"),
        ("p2/data.jsonl:1", "local:p2/data.jsonl", "p2"),
    ]
    assert describe_spec(str(tmp_path / "*" / "*.jsonl")) == "2 local files (.jsonl)"


def test_max_documents_stops_early(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("\n".join(f"line {i}" for i in range(10)), encoding="utf-8")
    assert texts(f, txt_unit="line", max_documents=3) == ["line 0", "line 1", "line 2"]
    assert texts(f, txt_unit="line", max_documents=0) == []


def test_describe_spec(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [{"text": "a"}])
    assert describe_spec(str(f)) == "1 local file (.jsonl)"
    assert describe_spec("HuggingFaceFW/fineweb-edu") == "Hugging Face dataset HuggingFaceFW/fineweb-edu"


# ---------------------------------------------------------------- invalid UTF-8


def test_invalid_utf8_error_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"fine\n" + BAD_UTF8 + b"\n")
    with pytest.raises(DataError) as err:
        list(iter_documents(str(f)))
    msg = str(err.value)
    assert str(f) in msg and "line 2" in msg and "--on-invalid-utf8 replace" in msg


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [("a.jsonl", b'{"text": "ok"}\n{"text": "' + BAD_UTF8 + b'"}\n', "line 2"),
     ("a.csv", b"text\nok\n" + BAD_UTF8 + b"\n", "line 3")],
)  # fmt: skip
def test_invalid_utf8_error_in_jsonl_and_csv(tmp_path: Path, name: str, content: bytes, line: str) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DataError, match=rf"{name}: {line}: invalid UTF-8 at byte"):
        list(iter_documents(str(f)))


def test_a_lone_surrogate_escape_is_refused_naming_its_line(tmp_path: Path) -> None:
    """`\\ud800` parses as JSON but is half a character: refused where it is read (the corpus copy would fail with
    a UnicodeEncodeError); a whole pair is one character and reads."""
    f = tmp_path / "a.jsonl"
    f.write_text('{"text": "ok \\ud83d\\ude00"}\n{"id": "x", "text": "half \\ud800 a"}\n')
    with pytest.raises(DataError, match=r"a\.jsonl: line 2: the escape \\ud800 is half of a UTF-16 surrogate pair"):
        list(iter_documents(str(f)))
    f.write_text('{"text": "ok \\ud83d\\ude00"}\n')
    assert [d.text for d in iter_documents(str(f))] == ["ok \U0001f600"]


def test_invalid_utf8_replace_gives_replacement_character(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"fine\n" + BAD_UTF8 + b"\n")
    assert texts(f, on_invalid_utf8="replace") == ["fine\ncaf\ufffd au lait"]


@pytest.mark.parametrize(
    ("name", "content", "kwargs", "expected"),
    [("a.txt", b"keep\n\n" + BAD_UTF8 + b"\nsame para\n\nalso kept\n", {}, [("a.txt:0", "keep"),
                                                                          ("a.txt:2", "also kept")]),
     ("a.txt", b"keep\n" + BAD_UTF8 + b"\n", {"txt_unit": "line"}, [("a.txt:1", "keep")]),
     ("a.jsonl", b'{"text": "' + BAD_UTF8 + b'"}\n{"text": "kept"}\n', {}, [("a.jsonl:2", "kept")]),
     ("a.csv", b'text\n"multi\n' + BAD_UTF8 + b'"\nkept\n', {}, [("a.csv:1", "kept")])],
)  # fmt: skip
def test_invalid_utf8_skip_drops_only_the_affected_documents(
    tmp_path: Path, name: str, content: bytes, kwargs: dict, expected: list
) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    got = [(d.id, d.text) for d in iter_documents(str(f), on_invalid_utf8="skip", **kwargs)]
    assert got == expected


def test_invalid_utf8_in_binary_parquet_column(tmp_path: Path) -> None:
    f = write_parquet(tmp_path / "b.parquet", {"text": [b"ok", BAD_UTF8]})
    assert texts(f, on_invalid_utf8="replace") == ["ok", "caf\ufffd au lait"]
    assert texts(f, on_invalid_utf8="skip") == ["ok"]
    with pytest.raises(DataError, match=r"b\.parquet: row 1: invalid UTF-8"):
        list(iter_documents(str(f)))


# ---------------------------------------------------------------- user mistakes


def test_missing_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the relative spec below must not exist wherever the tests run
    with pytest.raises(DataError, match="no such file or directory: .*nope.jsonl"):
        iter_documents(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="no such file or directory: .*matched nothing"):
        iter_documents(str(tmp_path / "*.parquet"))
    with pytest.raises(DataError, match="no such file or directory: data/train.jsonl"):
        iter_documents("data/train.jsonl")


def test_unsupported_suffix_lists_supported_ones(tmp_path: Path) -> None:
    f = tmp_path / "notes.docx"
    f.write_bytes(b"x")
    with pytest.raises(DataError) as err:
        iter_documents(str(f))
    assert "notes.docx: unsupported file type" in str(err.value)
    assert all(s in str(err.value) for s in SUPPORTED_SUFFIXES)


def test_directory_without_supported_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="has no supported files"):
        iter_documents(str(tmp_path))
    (tmp_path / "README.md").write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match="ignored 1 other files such as README.md"):
        iter_documents(str(tmp_path))


def test_jsonl_missing_column_names_column_keys_and_flag(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [{"content": "a", "meta": 1}])
    with pytest.raises(DataError) as err:
        list(iter_documents(str(f)))
    msg = str(err.value)
    assert "c.jsonl: line 1" in msg and "'text'" in msg and "content, meta" in msg and "--text-column" in msg


def test_csv_missing_column_lists_header(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    f.write_text("title,body\na,b\n", encoding="utf-8")
    expected = r"c\.csv: line 1: the header row has no column 'text' \(it has: title, body\)"
    with pytest.raises(DataError, match=expected):
        list(iter_documents(str(f)))


@pytest.mark.parametrize("name, header", [("c.csv", "text,title,text"), ("c.tsv", "text\ttitle\ttext")])
def test_a_text_column_named_twice_is_refused(tmp_path: Path, name: str, header: str) -> None:
    """The reader took the first of the two columns, silently: which text the corpus held was a writer's accident."""
    f = tmp_path / name
    f.write_text(header + "\n" + header.replace("text", "words").replace("title", "t") + "\n", encoding="utf-8")
    expected = (rf"{name}: line 1: column 'text' is named twice in the header; column names must be unique: "
                "rename one")
    with pytest.raises(DataError, match=expected):
        list(iter_documents(str(f)))


def test_a_column_named_twice_that_is_not_read_is_no_matter(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"  # a spreadsheet's export: two unnamed trailing columns
    f.write_text("text,,\none two,,\n", encoding="utf-8")
    assert texts(f) == ["one two"]


def test_a_parquet_text_column_named_twice_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "c.parquet"  # pyarrow allows it, and read the first of the two
    pq.write_table(pa.Table.from_arrays([pa.array(["first"]), pa.array(["second"])], names=["text", "text"]), f)
    with pytest.raises(DataError, match="c.parquet: column 'text' is named twice in the header; column names must be "
                                        "unique"):
        list(iter_documents(str(f)))


def test_parquet_missing_column_lists_columns(tmp_path: Path) -> None:
    f = write_parquet(tmp_path / "c.parquet", {"content": ["a"], "url": ["u"]})
    expected = r"c\.parquet has no column 'body' \(it has: content, url\); pass --text-column"
    with pytest.raises(DataError, match=expected):
        list(iter_documents(str(f), text_column="body"))


def test_invalid_json_line_names_line_number(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "a"}\n{"text": "b"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"c\.jsonl: line 2: not valid JSON"):
        list(iter_documents(str(f)))


@pytest.mark.parametrize("line, key", [('{"text": "a first", "text": "b second"}', "text"),
                                       ('{"text": "one", "meta": {"k": 1, "k": 2}}', "k")])
def test_a_jsonl_key_given_twice_is_refused_naming_its_line(tmp_path: Path, line: str, key: str) -> None:
    """json keeps the last of two values of one key: the corpus held "b second", silently."""
    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"c\.jsonl: line 2: the key '{key}' is given twice in one object; keys must "
                                        "be unique in an object: remove or rename one"):
        list(iter_documents(str(f)))


def test_non_string_value_is_an_error(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [{"text": "a"}, {"text": ["a", "list"]}])
    with pytest.raises(DataError, match=r"c\.jsonl: line 2: column 'text' holds a list, not a string"):
        list(iter_documents(str(f)))
    p = write_parquet(tmp_path / "n.parquet", {"text": [1, 2]})
    with pytest.raises(DataError, match=r"n\.parquet: row 0: column 'text' holds a int"):
        list(iter_documents(str(p)))


def test_csv_without_header_or_with_short_rows(tmp_path: Path) -> None:
    empty = tmp_path / "e.csv"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="header row .* is required"):
        list(iter_documents(str(empty)))
    ragged = tmp_path / "r.csv"
    ragged.write_text("id,text\n1,ok\n2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.csv: line 3: the row has 1 fields but the header has 2"):
        list(iter_documents(str(ragged)))


def test_damaged_gzip(tmp_path: Path) -> None:
    f = tmp_path / "a.txt.gz"
    f.write_bytes(b"plain text, not gzip")
    with pytest.raises(DataError, match=r"a\.txt\.gz: damaged or not gzip"):
        list(iter_documents(str(f)))


def test_bad_option_values(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("x", encoding="utf-8")
    expected = "txt_unit='sentence' is not allowed; choose one of file, paragraph, line"
    with pytest.raises(DataError, match=expected):
        iter_documents(str(f), txt_unit="sentence")  # type: ignore[arg-type]
    with pytest.raises(DataError, match="on_invalid_utf8='ignore' is not allowed"):
        iter_documents(str(f), on_invalid_utf8="ignore")  # type: ignore[arg-type]


# ---------------------------------------------------------------- Hugging Face hub (never the network)


@pytest.fixture
def fake_datasets(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A stand-in `datasets` module; `calls` records load_dataset's arguments, `result` is what it returns."""
    state = types.SimpleNamespace(calls=[], result=None)

    def load_dataset(*args, **kwargs):
        state.calls.append((args, kwargs))
        if isinstance(state.result, Exception):
            raise state.result
        return state.result

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    for var in (*hub_access._OFFLINE_VARS, *hub_access._PROXY_VARS, "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    return state


def _no_network(*args, **kwargs):
    raise AssertionError("a connection was attempted")


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_hub_offline_env_fails_at_once_in_one_line(
    fake_datasets: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    monkeypatch.setenv(var, "1")
    monkeypatch.setattr(socket, "create_connection", _no_network)
    with pytest.raises(DataError) as err:
        iter_documents("HuggingFaceFW/fineweb-edu")
    msg = str(err.value)
    assert "\n" not in msg and f"{var}=1" in msg and "cannot be reached" in msg
    assert "as PATH" in msg and "encoderlab data prepare offline" in msg
    assert fake_datasets.calls == []  # no hub call, so no retries and no wait


def test_hub_unreachable_host_fails_before_load_dataset(
    fake_datasets: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: connecting is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(DataError, match=rf"cannot connect to 127\.0\.0\.1:{port}") as err:
        iter_documents("wikitext")
    assert "\n" not in str(err.value) and "'wikitext' is not a local path" in str(err.value)
    assert fake_datasets.calls == []


def test_hub_rows_become_documents(
    fake_datasets: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "probe_hub", lambda spec: None)
    fake_datasets.result = [{"content": " a "}, {"content": ""}, {"content": None}, {"content": "b"}]
    got = list(iter_documents("org/corpus", text_column="content", hf_config="en", hf_split="validation"))
    assert got == [
        Document("org/corpus:0", "hf:org/corpus", "a"),
        Document("org/corpus:3", "hf:org/corpus", "b"),
    ]
    assert fake_datasets.calls == [(("org/corpus", "en"), {"split": "validation", "streaming": True})]


def test_hub_connection_errors_become_one_line_data_errors(
    fake_datasets: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "probe_hub", lambda spec: None)
    fake_datasets.result = ConnectionError("Couldn't reach 'org/corpus' on the Hub (LocalEntryNotFoundError)")
    with pytest.raises(DataError, match=r"cannot be reached \(ConnectionError: Couldn't reach"):
        iter_documents("org/corpus")

    def rows_then_drop():
        yield {"text": "first"}
        raise OSError("Read timed out")

    fake_datasets.result = rows_then_drop()
    it = iter_documents("org/corpus")
    assert next(it).text == "first"
    with pytest.raises(DataError, match="connection lost while streaming: OSError: Read timed out"):
        next(it)


def test_hub_missing_column(fake_datasets: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "probe_hub", lambda spec: None)
    fake_datasets.result = types.SimpleNamespace(column_names=["content", "url"])
    with pytest.raises(DataError, match=r"'org/corpus' has no column 'text' \(it has: content, url\)"):
        iter_documents("org/corpus")


def test_a_jsonl_records_own_id_and_source_are_kept_in_the_corpus(tmp_path):
    """`data prepare` keeps a user's `id` and `source` under those names and puts encoderlab's (where each text was
    read) beside them; reading the corpus back gives encoderlab's locator to the packer and the user's fields."""
    from encoderlab.core.io import write_jsonl as write_rows
    from encoderlab.data.prepare import _documents, corpus_row

    write_jsonl(tmp_path / "reviews.jsonl", [{"id": "r-17", "source": "amazon", "text": "great"},
                                             {"id": 42, "text": "bad"}, {"text": "plain"}])
    rows = [corpus_row(d) for d in iter_documents(str(tmp_path / "reviews.jsonl"))]
    assert rows == [
        {"id": "r-17", "source": "amazon", "text": "great", "encoderlab_id": "reviews.jsonl:1",
         "encoderlab_source": "local:reviews.jsonl"},
        {"id": 42, "source": "local:reviews.jsonl", "text": "bad", "encoderlab_id": "reviews.jsonl:2"},
        {"id": "reviews.jsonl:3", "source": "local:reviews.jsonl", "text": "plain"}]  # nothing of its own: as before
    write_rows(tmp_path / "documents.jsonl", rows)
    back = list(_documents(tmp_path / "documents.jsonl"))
    assert [(d.id, d.source) for d in back] == [("reviews.jsonl:1", "local:reviews.jsonl"),
                                                ("reviews.jsonl:2", "local:reviews.jsonl"),
                                                ("reviews.jsonl:3", "local:reviews.jsonl")]
    assert [corpus_row(d) for d in back] == rows  # the round trip keeps both


@pytest.mark.parametrize("name", ["b.jsonl.zst", "b.txt.bz2", "b.csv.xz", "b.parquet.gz", "b.jsonl.zip"])
def test_a_folder_with_data_compressed_in_a_way_not_read_is_refused_naming_the_file(
    tmp_path: Path, name: str
) -> None:
    # Skipping it as we skip a README would silently leave part of the corpus out.
    write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}])
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / name).write_bytes(b"\x28\xb5\x2f\xfd compressed")
    with pytest.raises(DataError) as err:
        iter_documents(str(tmp_path))
    message = str(err.value)
    assert f"sub/{name}" in message and "gzip" in message and "\n" not in message
    with pytest.raises(DataError, match=name.replace(".", r"\.")):
        iter_documents(str(tmp_path / "**" / "*"))


def test_a_folder_saved_by_datasets_save_to_disk_reads_its_rows_alone(tmp_path: Path) -> None:
    """A `Dataset.save_to_disk` folder was refused (its Arrow files unread, its state.json and dataset_info.json
    read as JSON Lines): its rows are read from its Arrow shards, in order, and its own JSON files are not corpus.
    The same rows as JSON Lines give the same texts; a single Arrow file of the random-access format reads too."""
    import datasets
    import pyarrow as pa

    texts = [f"row {i} of the saved set" for i in range(7)] + ["", "  last  "]
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"body": texts, "n": list(range(9))}).save_to_disk(str(saved), num_shards=2)
    docs = list(iter_documents(str(saved), text_column="body"))
    assert [d.text for d in docs] == [t.strip() for t in texts if t.strip()]
    assert docs[0].id == "data-00000-of-00002.arrow:0" and docs[-1].id == "data-00001-of-00002.arrow:3"
    table = pa.table({"text": ["one", "two"]})
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    assert [d.text for d in iter_documents(str(tmp_path / "f.arrow"))] == ["one", "two"]
    with pytest.raises(DataError, match=r"f\.arrow has no column 'body' \(it has: text\)"):
        list(iter_documents(str(tmp_path / "f.arrow"), text_column="body"))


def test_a_saved_dataset_dict_is_refused_naming_its_splits_folders(tmp_path: Path) -> None:
    """Read whole, a DatasetDict's folder would put its test split into the pretraining corpus."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a b", "c d"]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataError) as err:
        iter_documents(str(tmp_path / "dd"))
    assert str(err.value) == (f"{tmp_path / 'dd'} is a `datasets` DatasetDict saved with save_to_disk (splits train, "
                              "test); reading it whole would mix its splits into one corpus: give the folder of the "
                              f"split to pretrain on ({tmp_path / 'dd' / 'train'}, {tmp_path / 'dd' / 'test'})")
    assert [d.text for d in iter_documents(str(tmp_path / "dd" / "train"))] == ["a b", "c d"]


def test_a_saved_dataset_folder_with_shards_its_state_does_not_list_is_refused(tmp_path: Path) -> None:
    """save_to_disk into a folder keeps the shards of an earlier save there; load_from_disk reads only those its
    state.json lists, so reading every .arrow file gave the rows of both saves (a corpus doubled silently)."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(6)]})
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    with pytest.raises(DataError) as err:
        list(iter_documents(str(tmp_path / "saved")))
    stale = tmp_path / "saved" / "data-00000-of-00003.arrow"
    assert str(err.value).startswith(f"{stale}: not one of the files {tmp_path / 'saved' / 'state.json'} lists "
                                     "(data-00000-of-00002.arrow, data-00001-of-00002.arrow)"), err.value
    assert "\n" not in str(err.value)
    for name in ("data-00000-of-00003.arrow", "data-00001-of-00003.arrow", "data-00002-of-00003.arrow"):
        (tmp_path / "saved" / name).unlink()
    assert [d.text for d in iter_documents(str(tmp_path / "saved"))] == [f"row {i}" for i in range(6)]
    (tmp_path / "saved" / "data-00001-of-00002.arrow").unlink()  # a listed shard lost: its rows would be missing
    with pytest.raises(DataError, match=r"data-00001-of-00002\.arrow, which its state\.json lists, is missing"):
        list(iter_documents(str(tmp_path / "saved")))
