"""Sharded preparation (`data prepare --shard I/N`, `--join N`): the joined dataset is byte-identical for any N and
to the one-process prepare; a killed shard resumes from its complete parts; the token budget is exact."""
from __future__ import annotations

import filecmp
import json
import shutil
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_command

from encoderlab.core.errors import DataError
from encoderlab.data import shards
from encoderlab.data.packing import read_meta
from encoderlab.data.prepare import PrepareOptions, prepare
from encoderlab.data.tokenizer import train_bpe

SEQ = 32


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, synthetic):
    """5 parquet files of 60-100 documents (one with an empty row) and a 320-token BPE saved as tokenizer.json."""
    root = tmp_path_factory.mktemp("shards")
    docs = synthetic(400, seed=3)
    sizes, start = [60, 100, 80, 70, 90], 0
    for i, size in enumerate(sizes):
        texts = [d.text for d in docs[start:start + size]]
        texts[size // 2] = "   "  # skipped as empty, the same in every path
        pq.write_table(pa.table({"text": texts}), root / "src" / f"part{i}.parquet" if (root / "src").exists()
                       else _mkdir(root / "src") / f"part{i}.parquet")
        start += size
    tok = train_bpe((d.text for d in docs), 320)
    tok.tokenizer.save(str(root / "tokenizer.json"))
    return root


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _opts(corpus: Path, **kw) -> PrepareOptions:
    return PrepareOptions(seq_len=SEQ, val_fraction=0.1, tokenizer=str(corpus / "tokenizer.json"), **kw)


def _sharded(corpus: Path, out: Path, n: int, **join) -> dict:
    for i in range(n):
        prepare(str(corpus / "src"), out, _opts(corpus, shard=(i, n)), log=lambda _: None)
    return prepare(str(corpus / "src"), out, _opts(corpus, join=n, **join), log=lambda _: None)


def _same_packed(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir() if p.is_file())
    assert names == sorted(p.name for p in b.iterdir() if p.is_file())
    for name in names:
        if name != "meta.json":
            assert filecmp.cmp(a / name, b / name, shallow=False), name
    ma, mb = (json.loads((x / "meta.json").read_text()) for x in (a, b))
    ma.pop("inputs"), mb.pop("inputs")  # what each was made from: a corpus file or parts
    assert ma == mb


def test_join_is_byte_identical_for_any_n_and_to_one_process(corpus, tmp_path):
    one = prepare(str(corpus / "src"), tmp_path / "one", _opts(corpus), log=lambda _: None)
    joined = {n: _sharded(corpus, tmp_path / f"n{n}", n) for n in (1, 2, 3)}
    for n in (1, 2, 3):
        _same_packed(tmp_path / "one" / "packed", tmp_path / f"n{n}" / "packed")
        assert (tmp_path / f"n{n}" / "packed" / "meta.json").read_bytes() == \
            (tmp_path / "n1" / "packed" / "meta.json").read_bytes()
        assert joined[n]["corpus"]["documents"] == one["corpus"]["documents"] == 395
        assert joined[n]["corpus"]["words"] == one["corpus"]["words"]
    assert len(list((tmp_path / "n3" / "parts").glob("part-*.json"))) == 5  # one part per file
    assert read_meta(tmp_path / "n2" / "packed")["splits"]["validation"]["documents"] > 0
    logs: list[str] = []
    prepare(str(corpus / "src"), tmp_path / "n2", _opts(corpus, join=2), log=logs.append)
    assert logs == [f"packed shards up to date in {tmp_path / 'n2' / 'packed'}"]  # a second join reads nothing


def test_one_file_is_cut_into_blocks_of_documents(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "PART_DOCUMENTS", 25)
    src = corpus / "src" / "part1.parquet"
    prepare(str(src), tmp_path / "one", _opts(corpus), log=lambda _: None)
    for i in range(3):
        prepare(str(src), tmp_path / "n3", _opts(corpus, shard=(i, 3)), log=lambda _: None)
    prepare(str(src), tmp_path / "n3", _opts(corpus, join=3), log=lambda _: None)
    assert len(list((tmp_path / "n3" / "parts").glob("part-*.json"))) == 4  # 99 documents
    _same_packed(tmp_path / "one" / "packed", tmp_path / "n3" / "packed")


def test_budget_is_exact_and_the_same_for_any_n(corpus, tmp_path):
    budget = 40 * SEQ
    for n in (1, 3):
        summary = _sharded(corpus, tmp_path / f"n{n}", n, max_tokens=budget)
        meta = read_meta(tmp_path / f"n{n}" / "packed")
        assert meta["max_tokens"] == summary["max_tokens"] == budget
        assert meta["splits"]["train"]["tokens"] == budget and meta["splits"]["train"]["dropped_tail_tokens"] == 0
        tokens = np.fromfile(tmp_path / f"n{n}" / "packed" / "train-00000.tokens.bin", dtype=np.uint16)
        assert tokens.size == budget
    _same_packed(tmp_path / "n1" / "packed", tmp_path / "n3" / "packed")
    one = prepare(str(corpus / "src"), tmp_path / "one", _opts(corpus, max_tokens=budget), log=lambda _: None)
    assert one["splits"]["train"]["tokens"] == budget
    _same_packed(tmp_path / "one" / "packed", tmp_path / "n1" / "packed")
    with pytest.raises(DataError, match="fewer than --max-tokens"):
        _sharded(corpus, tmp_path / "n1", 1, max_tokens=10_000 * SEQ)


def test_join_refuses_a_missing_or_damaged_shard_naming_it(corpus, tmp_path):
    out = tmp_path / "d"
    _sharded(corpus, out, 2)
    part = out / "parts" / "part-000003.tokens.bin"  # unit 3 belongs to shard 1/2
    data = bytearray(part.read_bytes())
    data[5] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"part 3: .*part-000003.tokens.bin does not match the SHA-256.*--shard 1/2"):
        prepare(str(corpus / "src"), out, _opts(corpus, join=2, force=True), log=lambda _: None)
    part.write_bytes(bytes(data[:-2]))
    with pytest.raises(DataError, match=r"part 3 of shard 1/2: .*has \d+ bytes, its manifest says"):
        prepare(str(corpus / "src"), out, _opts(corpus, join=2, force=True), log=lambda _: None)
    redone = prepare(str(corpus / "src"), out, _opts(corpus, shard=(1, 2)), log=lambda _: None)
    assert (redone["parts_written"], redone["parts_skipped"]) == (1, 1)  # only the damaged part again
    (out / "parts" / "shard-0-of-2.json").unlink()
    with pytest.raises(DataError, match=r"shard 0/2 is not complete .*--shard 0/2"):
        prepare(str(corpus / "src"), out, _opts(corpus, join=2), log=lambda _: None)


def test_an_edited_source_file_is_tokenised_again_not_joined_stale(corpus, tmp_path):
    """Parts were matched on the source's path, never its files: an edited file was joined as it was before."""
    src = tmp_path / "src"
    shutil.copytree(corpus / "src", src)
    (tmp_path / "c").mkdir()
    shutil.copy(corpus / "tokenizer.json", tmp_path / "c" / "tokenizer.json")
    shutil.copytree(src, tmp_path / "c" / "src")
    out = tmp_path / "d"
    _sharded(tmp_path / "c", out, 2)
    edited = tmp_path / "c" / "src" / "part2.parquet"  # unit 2: shard 0/2
    table = pq.read_table(edited).to_pylist()
    table[0]["text"] = table[0]["text"].upper()  # the same length
    pq.write_table(pa.table({"text": [r["text"] for r in table]}), edited)
    with pytest.raises(DataError, match=r"part 2 of shard 0/2: part2\.parquet changed since the part was tokenised "
                       r"\(size or modification time\): run .*--shard 0/2` again"):
        prepare(str(tmp_path / "c" / "src"), out, _opts(tmp_path / "c", join=2), log=lambda _: None)
    redone = prepare(str(tmp_path / "c" / "src"), out, _opts(tmp_path / "c", shard=(0, 2)), log=lambda _: None)
    assert (redone["parts_written"], redone["parts_skipped"]) == (1, 2)  # that file's part alone
    prepare(str(tmp_path / "c" / "src"), out, _opts(tmp_path / "c", join=2), log=lambda _: None)
    prepare(str(tmp_path / "c" / "src"), tmp_path / "one", _opts(tmp_path / "c"), log=lambda _: None)
    _same_packed(tmp_path / "one" / "packed", out / "packed")


def test_a_join_without_its_source_takes_the_parts_as_tokenised_and_says_so(corpus, tmp_path, monkeypatch):
    """The parts hold the text: a source moved or deleted after tokenising is joined unchecked, saying so in one
    line. It was refused as "no such file or directory", or, given as a relative path (which then looks like a hub
    id), as changed since it was tokenised."""
    monkeypatch.chdir(tmp_path)
    prepare(str(corpus / "src"), tmp_path / "one", _opts(corpus), log=lambda _: None)
    for source in ("src", str(tmp_path / "src")):
        shutil.copytree(corpus / "src", tmp_path / "src")
        out = tmp_path / f"d{len(source)}"
        for i in range(2):
            prepare(source, out, _opts(corpus, shard=(i, 2)), log=lambda _: None)
        shutil.rmtree(tmp_path / "src")
        logs: list[str] = []
        summary = prepare(source, out, _opts(corpus, join=2), log=logs.append)
        assert summary["corpus"]["documents"] == 395
        assert [line for line in logs if "not there" in line] == [
            f"{source} is not there (moved or deleted since it was tokenised): the parts are taken as they were "
            "tokenised, unchecked for changes to it"]
        _same_packed(tmp_path / "one" / "packed", out / "packed")


# Runs the command line with the third part stalled after its first batch is written (temporary files half done).
STALL_THIRD_PART = """
import sys, time
from encoderlab.data import packing
original, calls = packing.chunks, []
def stalling(items, size):
    calls.append(1)
    for chunk in original(items, size):
        yield chunk
        if len(calls) == 3:
            time.sleep(600)
packing.chunks = stalling
from encoderlab.cli import main
sys.argv = ["encoderlab", *sys.argv[1:]]
main()
"""


def test_a_killed_shard_resumes_from_its_complete_parts(corpus, tmp_path):
    """Shard 0/1 is killed (SIGKILL) while writing its third part, then run again: the two complete parts are
    skipped, the half-written one is removed and redone, and the join equals an uninterrupted run's."""
    out = tmp_path / "killed"
    args = [sys.executable, "-c", STALL_THIRD_PART, "data", "prepare", str(corpus / "src"), "--out", str(out),
            "--tokenizer", str(corpus / "tokenizer.json"), "--shard", "0/1"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((out / "parts").glob(".part-000002.*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert sorted(p.name for p in (out / "parts").glob("part-*.json")) == ["part-000000.json", "part-000001.json"]
    assert list((out / "parts").glob(".part-000002.*"))  # the half-written part's temporary files
    resumed = prepare(str(corpus / "src"), out, _opts(corpus, shard=(0, 1)), log=lambda _: None)
    assert (resumed["parts_skipped"], resumed["parts_written"]) == (2, 3)
    assert not list((out / "parts").glob(".*"))  # no temporary file left
    prepare(str(corpus / "src"), out, _opts(corpus, join=1), log=lambda _: None)
    _sharded(corpus, tmp_path / "whole", 1)
    _same_packed(tmp_path / "whole" / "packed", out / "packed")


def test_the_join_a_shard_names_next_packs_as_the_shards_were_asked(corpus, tmp_path, monkeypatch, capsys):
    """The `next:` line after a shard, pasted as it is: its join is given the shards' --text-column (without it the
    join was refused, and told to run the shards again without it too) and their --seq-len and --val-fraction
    (without them it packed windows of 512, silently)."""
    texts = pq.read_table(corpus / "src" / "part0.parquet")["text"].to_pylist()
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in texts))
    monkeypatch.chdir(tmp_path)
    given = ["data", "prepare", "c.jsonl", "--out", "o", "--tokenizer", corpus / "tokenizer.json",
             "--text-column", "body", "--seq-len", SEQ, "--val-fraction", 0.1]
    for i in range(2):
        code, out, err = run_command(monkeypatch, capsys, *given, "--shard", f"{i}/2")
        assert code == 0, err
    prefix = "next: once all 2 shards have run, "
    line = out.strip().splitlines()[-1]
    assert line.startswith(prefix), out
    join = shlex.split(line.removeprefix(prefix))[1:]
    without = [a for i, a in enumerate(join) if "--text-column" not in join[max(i - 1, 0):i + 1]]
    code, out, err = run_command(monkeypatch, capsys, *without)  # read as "text": its shards' parts are not its own
    assert code == 2 and "give the join the --text-column, --txt-unit and --on-invalid-utf8 its shards were" in err
    code, out, err = run_command(monkeypatch, capsys, *join)
    assert code == 0, err
    meta = read_meta(tmp_path / "o" / "packed")
    assert (meta["seq_len"], meta["val_fraction"]) == (SEQ, 0.1)
    assert meta["splits"]["train"]["documents"] + meta["splits"]["validation"]["documents"] == len(texts) - 1


@pytest.mark.parametrize("shard", [False, True], ids=["first-prepare", "shard"])
def test_ctrl_c_in_data_prepare_says_so_in_one_line_and_keeps_nothing_half_written(corpus, tmp_path, shard):
    """Ctrl-C exited 130 without a word (typer turns the interrupt into a silent exit code), and a shard left its
    half-written part's temporary files. Interrupted while writing (a first prepare: its packed shards; a shard: its
    third part), it says what stopped and what is kept; a first prepare's folder is removed, a shard's complete
    parts stay."""
    out = tmp_path / "out"
    args = [sys.executable, "-c", STALL_THIRD_PART.replace("len(calls) == 3", f"len(calls) == {3 if shard else 1}"),
            "data", "prepare", str(corpus / "src"), "--out", str(out), "--tokenizer", str(corpus / "tokenizer.json"),
            "--seq-len", str(SEQ), *(["--shard", "0/1"] if shard else [])]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    writing = out / "parts" / ".part-000002.*" if shard else out / ".packed.tmp-*"
    deadline = time.monotonic() + 120
    while not list(writing.parent.glob(writing.name)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    said = f"interrupted: data prepare into {out} stopped; nothing half-written was kept"
    kept = " (the parts it finished are kept: the same command goes on from them)"
    assert stderr.strip().splitlines()[-1].endswith(said + (kept if shard else "")), stderr
    if shard:
        assert sorted(p.name for p in (out / "parts").iterdir()) == [
            f"part-{i:06d}.{kind}" for i in range(2) for kind in ("documents.tsv", "json", "tokens.bin")]
    else:
        assert not out.exists()
