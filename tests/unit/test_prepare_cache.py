"""`data prepare`'s cache: the packed shards are reused only when the corpus's content is the same."""
from __future__ import annotations

import hashlib
import json

import numpy as np

from encoderlab.data.prepare import PrepareOptions, prepare
from encoderlab.data.tokenizer import load_tokenizer

WORDS = "the cat sat on a mat while dogs ran through green fields of grass".split()


def _corpus(path, first: str) -> None:
    paragraphs = [first] + [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(30)) for i in range(40)]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")


def _first_window(out) -> str:
    tok = load_tokenizer(str(out / "packed" / "tokenizer"))
    dtype = json.loads((out / "packed" / "meta.json").read_text())["dtype"]
    ids = np.fromfile(out / "packed" / "train-00000.tokens.bin", dtype=dtype)[:12]
    return tok.tokenizer.decode(ids.tolist())


def test_a_same_size_edit_of_the_source_is_packed_again(tmp_path):
    """An edit that keeps the counts of documents, words and characters (GRASS for grass) once left the old
    shards "up to date": the cache now keys on the corpus's SHA-256."""
    src, out, said = tmp_path / "corpus.txt", tmp_path / "d", []
    opts = PrepareOptions(tokenizer=None, vocab_size=300, seq_len=16, val_fraction=0.0)
    _corpus(src, "green grass grows here")
    prepare(str(src), out, opts, log=said.append)
    assert "green grass" in _first_window(out)
    prepare(str(src), out, opts, log=said.append)
    assert said[-1].startswith("packed shards up to date")  # the same text: nothing packed again
    _corpus(src, "GREEN GRASS grows here")
    prepare(str(src), out, opts, log=said.append)
    assert not said[-1].startswith("packed shards up to date")
    assert "GREEN GRASS" in _first_window(out)
    manifest = json.loads((out / "corpus" / "manifest.json").read_text())

    assert manifest["sha256"] == hashlib.sha256((out / "corpus" / "documents.jsonl").read_bytes()).hexdigest()


def _vocab_folder(folder, words: list[str]) -> None:
    """A BERT tokenizer folder as many are saved: vocab.txt and a config, no tokenizer.json."""
    folder.mkdir(exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                              "do_lower_case": True}))


def test_a_changed_tokenizer_folder_without_tokenizer_json_is_packed_again(tmp_path):
    """The cache keyed a --tokenizer folder on its tokenizer.json alone ("no tokenizer.json" for a vocab.txt
    folder): another vocabulary in the same folder left the shards of the old one "up to date"."""
    src, out, tok, said = tmp_path / "corpus.txt", tmp_path / "d", tmp_path / "tok", []
    _corpus(src, "green grass grows here")
    _vocab_folder(tok, WORDS + ["grows", "here"])
    opts = PrepareOptions(tokenizer=str(tok), seq_len=16, val_fraction=0.0)
    prepare(str(src), out, opts, log=said.append)
    prepare(str(src), out, opts, log=said.append)
    assert said[-1].startswith("packed shards up to date")
    _vocab_folder(tok, list(reversed(WORDS)) + ["grows", "here"])  # the same words, other ids
    prepare(str(src), out, opts, log=said.append)
    assert not said[-1].startswith("packed shards up to date")
    packed = load_tokenizer(str(out / "packed" / "tokenizer")).tokenizer
    assert packed.token_to_id("the") == load_tokenizer(str(tok)).tokenizer.token_to_id("the")


def test_a_repack_for_another_window_reuses_the_bpe_trained_from_the_same(tmp_path):
    """Another --seq-len trained the byte-level BPE again from the same corpus and settings, which gives the same
    tokenizer: it is now taken from the packed folder, and the data equals a prepare from scratch. Another
    vocabulary trains it again."""
    src, out, fresh, said = tmp_path / "corpus.txt", tmp_path / "d", tmp_path / "fresh", []
    _corpus(src, "green grass grows here")
    prepare(str(src), out, PrepareOptions(vocab_size=300, seq_len=16, val_fraction=0.0), log=said.append)
    assert "training a byte-level BPE with 300 tokens" in said
    said.clear()
    opts = PrepareOptions(vocab_size=300, seq_len=32, val_fraction=0.0)
    prepare(str(src), out, opts, log=said.append)
    assert any(line.startswith("tokenizer: the byte-level BPE of") for line in said)
    assert not any(line.startswith("training a byte-level BPE") for line in said)
    prepare(str(src), fresh, opts, log=lambda _: None)
    for name in ("train-00000.tokens.bin", "tokenizer/tokenizer.json"):
        assert (out / "packed" / name).read_bytes() == (fresh / "packed" / name).read_bytes()
    meta = [json.loads((f / "packed" / "meta.json").read_text()) for f in (out, fresh)]
    assert meta[0]["splits"] == meta[1]["splits"] and meta[0]["bpe_inputs"] == meta[1]["bpe_inputs"]
    said.clear()
    prepare(str(src), out, PrepareOptions(vocab_size=310, seq_len=16, val_fraction=0.0), log=said.append)
    assert "training a byte-level BPE with 310 tokens" in said
