"""Packing keeps every document recoverable from the token stream; the loader is deterministic, resumable (even
across epochs and world sizes) and splits each global batch over ranks without overlap."""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from encoderlab.core.errors import DataError, Failed
from encoderlab.core.io import sha256_of
from encoderlab.data.documents import Document
from encoderlab.data.loader import PackedDataset, PackedLoader
from encoderlab.data.packing import is_heldout, no_validation_note, pack, read_meta, token_dtype
from encoderlab.data.tokenizer import TextTokenizer, train_bpe

SEQ = 16
WORDS = ("alpha", "beta", "gamma", "delta", "river", "mountain", "forest", "city", "music", "story", "night",
         "light", "water", "stone", "garden", "teacher", "student", "market", "station", "bridge")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    rng = random.Random(0)
    return train_bpe([sentence(rng, 12) for _ in range(200)] + ["Café 🎉 naïve 42"] * 3, vocab_size=300)


def varied_docs() -> list[Document]:
    rng = random.Random(1)
    texts = [
        "Hi.",
        "A short one with café and 🎉.",
        sentence(rng, 60) + "\n" + sentence(rng, 40),  # several windows long
        "",  # an empty document is still <bos><eos>
        "Middle sized document that quotes <mask> as text: " + sentence(rng, 10),
        sentence(rng, 5),
    ]
    docs = [Document(f"doc-{i}", "unit" if i % 2 else "other", t) for i, t in enumerate(texts)]
    docs.append(Document("filler", "unit", sentence(rng, 80)))  # the dropped tail falls inside this one
    return docs


def read_stream(root: Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    ds = PackedDataset(root, split)
    tokens, docs = ds.windows(np.arange(len(ds)))
    return tokens.reshape(-1), docs.reshape(-1)


def read_tsv(root: Path, split: str = "train") -> list[dict]:
    with open(root / f"{split}.documents.tsv", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


# ----------------------------------------------------------------------------------------------- packing


def test_pack_then_decode_gives_the_documents_back(tok, tmp_path):
    docs = varied_docs()
    meta = pack(docs, tok, tmp_path / "p", seq_len=SEQ, val_fraction=0.0, shard_tokens=SEQ * 3)
    assert len(meta["splits"]["train"]["shards"]) > 1  # several shards, read back as one stream
    stream, ids = read_stream(tmp_path / "p")
    assert len(stream) == meta["splits"]["train"]["windows"] * SEQ
    assert np.all(np.diff(ids) >= 0)  # document ids never go back
    for d, doc in enumerate(docs[:-1]):
        where = np.nonzero(ids == d)[0]
        assert len(where) and np.all(np.diff(where) == 1)  # contiguous
        seg = stream[where]
        assert seg[0] == tok.bos_id and seg[-1] == tok.eos_id
        assert tok.decode(seg[1:-1].tolist()) == doc.text
        assert tok.bos_id not in seg[1:-1] and tok.eos_id not in seg[1:-1]
    long_doc = np.nonzero(ids == 2)[0]
    assert len(long_doc) > 2 * SEQ and long_doc[0] // SEQ != long_doc[-1] // SEQ  # spans windows
    # The filler starts with <bos> and its kept tokens are a prefix of its encoding.
    last = len(docs) - 1
    seg = stream[ids == last]
    [filler_ids] = tok.encode_batch([docs[-1].text])
    assert seg[0] == tok.bos_id and seg[1:].tolist() == filler_ids[: len(seg) - 1]


def test_dropped_tail_and_documents_tsv(tok, tmp_path):
    docs = varied_docs()
    meta = pack(docs, tok, tmp_path / "p", seq_len=SEQ)
    encoded = tok.encode_batch([d.text for d in docs])
    total = sum(len(e) + 2 for e in encoded)
    train = meta["splits"]["train"]
    assert train["dropped_tail_tokens"] == total % SEQ == total - train["windows"] * SEQ
    assert train["tokens"] == train["windows"] * SEQ and train["documents"] == len(docs)
    rows = read_tsv(tmp_path / "p")
    assert [(int(r["index"]), r["id"], r["source"], int(r["tokens"])) for r in rows] == [
        (i, d.id, d.source, len(e) + 2) for i, (d, e) in enumerate(zip(docs, encoded))]
    assert read_meta(tmp_path / "p") == meta
    assert (tmp_path / "p" / "tokenizer" / "tokenizer.json").exists()


def test_a_corpus_without_a_validation_window_says_so(tok, tmp_path):
    meta = pack(varied_docs(), tok, tmp_path / "none", seq_len=SEQ, val_fraction=0.0)
    assert no_validation_note(meta) == ("no validation window: no document was held out; pretraining on this data "
                                        "reports no validation loss (raise --val-fraction from 0.0 to hold out more)")
    ids = [f"doc-{i}" for i in range(200)]
    kept = [Document(i, "unit", sentence(random.Random(i), 30)) for i in ids if not is_heldout(i, 0.5)][:8]
    held = next(i for i in ids if is_heldout(i, 0.5))
    meta = pack([*kept, Document(held, "unit", "Hi.")], tok, tmp_path / "short", seq_len=SEQ, val_fraction=0.5)
    tokens = meta["splits"]["validation"]["dropped_tail_tokens"]
    assert meta["splits"]["validation"]["windows"] == 0 and 0 < tokens < SEQ
    assert no_validation_note(meta).startswith(f"no validation window: its 1 held-out document(s) have {tokens} "
                                               f"tokens, fewer than one window of {SEQ}")
    meta = pack([*kept, Document(held, "unit", sentence(random.Random(0), 30))], tok, tmp_path / "long", seq_len=SEQ,
                val_fraction=0.5)
    assert meta["splits"]["validation"]["windows"] > 0 and no_validation_note(meta) is None


def test_token_dtype(tok, tmp_path):
    assert token_dtype(300) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32 and token_dtype(151_936) == np.uint32
    meta = pack(varied_docs(), tok, tmp_path / "p", seq_len=SEQ)
    assert meta["dtype"] == "uint16"
    shard = meta["splits"]["train"]["shards"][0]
    size = (tmp_path / "p" / f"{shard['name']}.tokens.bin").stat().st_size
    assert size == shard["windows"] * SEQ * 2


def test_a_tokenizer_whose_ids_pass_16_bits_packs_them_whole(tmp_path):
    """Ids with gaps: seven tokens, the largest id 70,000. The id space, not the count, sizes the vocabulary and
    the packed dtype, so the id is stored and read back whole (counting tokens gave uint16 and an OverflowError)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, "<unk>": 3, "<mask>": 4, "world": 5, "hello": 70_000}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    sparse = TextTokenizer(raw, 0, 1, 2, 4, origin="sparse")
    assert sparse.vocab_size == 70_001
    meta = pack([Document("d0", "test", "hello world " * 40)], sparse, tmp_path / "p", seq_len=SEQ)
    assert meta["dtype"] == "uint32" and meta["tokenizer"]["vocab_size"] == 70_001
    tokens, _ = PackedDataset(tmp_path / "p").windows(np.arange(2))
    assert tokens[0][:3].tolist() == [0, 70_000, 5]


def test_heldout_split_is_stable_per_document(tok, tmp_path):
    rng = random.Random(3)
    docs = [Document(f"d{i}", "s", sentence(rng, 8)) for i in range(200)]
    pack(docs, tok, tmp_path / "a", seq_len=8, val_fraction=0.2)
    grown = docs[::-1] + [Document(f"new{i}", "s", sentence(rng, 8)) for i in range(100)]  # reordered and grown
    pack(grown, tok, tmp_path / "b", seq_len=8, val_fraction=0.2)
    held_a = {r["id"] for r in read_tsv(tmp_path / "a", "validation")}
    held_b = {r["id"] for r in read_tsv(tmp_path / "b", "validation")}
    train_a = {r["id"] for r in read_tsv(tmp_path / "a", "train")}
    assert held_a and not held_a & train_a and held_a | train_a == {d.id for d in docs}
    assert held_b & {d.id for d in docs} == held_a
    assert held_a == {d.id for d in docs if is_heldout(d.id, 0.2)}
    fraction = np.mean([is_heldout(f"id-{i}", 0.2) for i in range(20_000)])
    assert 0.18 < fraction < 0.22
    assert not any(is_heldout(f"id-{i}", 0.0) for i in range(100))
    assert len(PackedDataset(tmp_path / "a", "validation")) > 0


def test_empty_corpus(tok, tmp_path):
    with pytest.raises(DataError, match="empty"):
        pack([], tok, tmp_path / "p", seq_len=SEQ)
    assert not (tmp_path / "p").exists()  # nothing half-written


def test_fewer_tokens_than_a_window(tok, tmp_path):
    with pytest.raises(DataError, match="fewer than one window"):
        pack([Document("a", "s", "Hi.")], tok, tmp_path / "p", seq_len=64)
    assert not (tmp_path / "p").exists()


def test_a_train_split_short_of_a_window_is_refused_counting_its_tokens_not_the_corpus(tok, tmp_path):
    # The corpus makes whole windows; what was held out for validation leaves train short of one.
    ids = [f"doc-{i}" for i in range(200)]
    kept = next(i for i in ids if not is_heldout(i, 0.5))
    held = [Document(i, "unit", sentence(random.Random(i), 30)) for i in ids if is_heldout(i, 0.5)][:4]
    with pytest.raises(DataError) as err:
        pack([Document(kept, "unit", "Hi."), *held], tok, tmp_path / "p", seq_len=SEQ, val_fraction=0.5)
    train = len(tok.encode_batch(["Hi."])[0]) + 2
    assert str(err.value).startswith(f"the train split has {train} tokens, fewer than one window of --seq-len {SEQ} "
                                     "(--val-fraction 0.5 held out ")
    assert "--val-fraction" in str(err.value).split("add text")[1] and not (tmp_path / "p").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"seq_len": 7}, "--seq-len 7 is too small; use at least 8"),
    ({"seq_len": SEQ, "val_fraction": 1.0}, "--val-fraction 1.0 must be in [0, 1)"),
])
def test_a_shape_out_of_range_names_the_option(tok, tmp_path, kwargs, message):
    with pytest.raises(DataError) as err:
        pack(varied_docs(), tok, tmp_path / "p", **kwargs)
    assert str(err.value).startswith(message)


def test_bad_arguments(tok, tmp_path):
    with pytest.raises(DataError):
        pack(varied_docs(), tok, tmp_path / "p", seq_len=4)
    with pytest.raises(DataError):
        pack(varied_docs(), tok, tmp_path / "p", seq_len=SEQ, val_fraction=1.0)
    with pytest.raises(DataError, match="not a packed dataset"):
        PackedDataset(tmp_path)


# ----------------------------------------------------------------------------------------------- loader


def make_dataset(tok: TextTokenizer, root: Path, n_docs: int, seed: int = 5) -> PackedDataset:
    rng = random.Random(seed)
    docs = [Document(f"d{i}", "s", f"Document {i}: " + sentence(rng, rng.randint(3, 20))) for i in range(n_docs)]
    pack(docs, tok, root, seq_len=8, shard_tokens=8 * 7)  # 7 windows per shard: batches cross shards
    return PackedDataset(root)


@pytest.fixture(scope="module")
def dataset(tok, tmp_path_factory) -> PackedDataset:
    return make_dataset(tok, tmp_path_factory.mktemp("packed") / "ds", 40)


@pytest.fixture(scope="module")
def small(tok, tmp_path_factory) -> PackedDataset:
    return make_dataset(tok, tmp_path_factory.mktemp("packed") / "small", 3, seed=6)


def test_the_index_records_hashes_and_the_largest_token_and_readers_check_sizes(tok, tmp_path):
    """meta.json holds each shard file's SHA-256 and the largest token id; a cut or missing shard is refused naming
    it when the data is opened, also for an index written before those fields existed."""
    meta = pack(varied_docs(), tok, tmp_path / "p", seq_len=SEQ, shard_tokens=SEQ * 4)
    tokens = np.concatenate([np.fromfile(tmp_path / "p" / f"{s['name']}.tokens.bin", dtype=np.uint16)
                             for split in meta["splits"].values() for s in split["shards"]])
    assert meta["max_token_id"] == int(tokens.max())
    for split in meta["splits"].values():
        for shard in split["shards"]:
            for kind, digest in shard["sha256"].items():
                assert sha256_of(tmp_path / "p" / f"{shard['name']}.{kind}.bin") == digest
    for shard in meta["splits"]["train"]["shards"]:  # as encoderlab wrote them before
        del shard["sha256"]
    del meta["max_token_id"]
    (tmp_path / "p" / "meta.json").write_text(json.dumps(meta))
    assert len(PackedDataset(tmp_path / "p")) == meta["splits"]["train"]["windows"]
    last = tmp_path / "p" / f"{meta['splits']['train']['shards'][-1]['name']}.docids.bin"
    with open(last, "r+b") as f:
        f.truncate(f.seek(0, 2) - 4)
    windows = meta["splits"]["train"]["shards"][-1]["windows"]
    size = windows * SEQ * 4
    with pytest.raises(DataError, match=rf"packed shard {last} has {size - 4} bytes, meta.json expects {size} "
                                        rf"\({windows} windows x {SEQ} tokens x 4 bytes\): prepare"):
        PackedDataset(tmp_path / "p", "validation")  # every split's shards are checked


@pytest.mark.parametrize("interruption", [DataError("no document"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_failed_prepare_leaves_nothing_behind(tmp_path, monkeypatch, interruption):
    """The folders a failed or interrupted prepare created are removed; an earlier prepared folder is kept."""
    from encoderlab.data import prepare as prep

    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": d.text}) + "\n" for d in varied_docs()))
    opts = prep.PrepareOptions(vocab_size=300, seq_len=SEQ, val_fraction=0.0)

    def fails(*args, **kwargs):
        raise interruption

    monkeypatch.setattr(prep.packing, "pack", fails)
    with pytest.raises(type(interruption)):
        prep.prepare(str(corpus), tmp_path / "new" / "data", opts, log=lambda message: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]
    monkeypatch.undo()
    prep.prepare(str(corpus), tmp_path / "data", opts, log=lambda message: None)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    monkeypatch.setattr(prep.packing, "pack", fails)
    with pytest.raises(type(interruption)):
        prep.prepare(str(corpus), tmp_path / "data", prep.PrepareOptions(vocab_size=300, seq_len=SEQ, force=True),
                     log=lambda message: None)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def window_keys(ds: PackedDataset) -> dict[bytes, int]:
    tokens, docs = ds.windows(np.arange(len(ds)))
    keys = {tokens[i].tobytes() + docs[i].tobytes(): i for i in range(len(ds))}
    assert len(keys) == len(ds)  # every window is distinguishable, so batches can be mapped back to indices
    return keys


def indices_of(batch, keys) -> list[int]:
    return [keys[t.numpy().tobytes() + d.numpy().tobytes()] for t, d in zip(batch.input_ids, batch.doc_ids)]


def batches(loader: PackedLoader, n: int) -> list:
    return [loader.next_batch() for _ in range(n)]


def same(a, b) -> bool:
    return torch.equal(a.input_ids, b.input_ids) and torch.equal(a.doc_ids, b.doc_ids) and a.step == b.step


def test_dataset_windows_match_files(dataset):
    meta = dataset.meta["splits"]["train"]
    assert len(dataset) == meta["windows"] > 20 and len(meta["shards"]) > 2
    flat = np.concatenate([np.fromfile(dataset.root / f"{s['name']}.tokens.bin", dtype=np.uint16)
                           for s in meta["shards"]])
    tokens, docs = dataset.windows(np.arange(len(dataset))[::-1])
    assert tokens.dtype == np.int64 and docs.dtype == np.int64
    assert np.array_equal(tokens[::-1].reshape(-1), flat)
    with pytest.raises(IndexError):
        dataset.windows(np.array([len(dataset)]))


def test_same_seed_same_batches_different_seed_different(dataset):
    a, b = batches(PackedLoader(dataset, 4, seed=1), 10), batches(PackedLoader(dataset, 4, seed=1), 10)
    assert all(same(x, y) for x, y in zip(a, b))
    assert [x.step for x in a] == list(range(10))
    assert a[0].input_ids.shape == (4, 8) and a[0].input_ids.dtype == torch.int64
    c = batches(PackedLoader(dataset, 4, seed=2), 10)
    assert not all(same(x, y) for x, y in zip(a, c))


def test_every_window_once_per_epoch(dataset):
    keys, n = window_keys(dataset), len(dataset)
    loader = PackedLoader(dataset, 6, seed=3)  # 6 does not divide n in general: batches straddle epochs
    seen = [i for b in batches(loader, (3 * n) // 6 + 1) for i in indices_of(b, keys)]
    epochs = [seen[e * n : (e + 1) * n] for e in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(n))
    assert epochs[0] != epochs[1]  # each epoch is reshuffled
    assert epochs[0] != list(range(n))
    assert loader.epoch == pytest.approx(len(seen) / n)


@pytest.mark.parametrize("which,batch", [("dataset", 4), ("small", 4), ("small", 3)])
def test_resume_equals_no_interruption(request, which, batch):
    ds = request.getfixturevalue(which)
    if which == "small":
        assert len(ds) < 7 * batch  # 7 batches cross at least one epoch boundary
    reference = batches(PackedLoader(ds, batch, seed=9), 10)
    first = PackedLoader(ds, batch, seed=9)
    run = batches(first, 7)
    assert all(same(x, y) for x, y in zip(run, reference))
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores must survive JSON
    resumed = PackedLoader(ds, batch, seed=9)
    resumed.load_state_dict(state)
    after = batches(resumed, 3)
    assert all(same(x, y) for x, y in zip(after, reference[7:]))
    assert after[0].step == 7


@pytest.mark.parametrize("world", [2, 4])
def test_rank_slices_partition_the_global_batch(dataset, world):
    keys = window_keys(dataset)
    single = batches(PackedLoader(dataset, 8, seed=4), 6)  # 48 samples: crosses the epoch boundary too
    ranks = [batches(PackedLoader(dataset, 8, seed=4, rank=r, world_size=world), 6) for r in range(world)]
    for step, whole in enumerate(single):
        parts = [ranks[r][step] for r in range(world)]
        assert all(p.input_ids.shape == (8 // world, 8) and p.step == step for p in parts)
        assert torch.equal(torch.cat([p.input_ids for p in parts]), whole.input_ids)
        assert torch.equal(torch.cat([p.doc_ids for p in parts]), whole.doc_ids)
        owned = [set(indices_of(p, keys)) for p in parts]
        if step * 8 // len(dataset) == (step * 8 + 7) // len(dataset):  # within one epoch: disjoint indices
            assert sum(len(o) for o in owned) == 8 and len(set().union(*owned)) == 8


def test_indivisible_global_batch_and_bad_rank(dataset):
    with pytest.raises(DataError, match="multiple of 4"):
        PackedLoader(dataset, 6, world_size=4)
    with pytest.raises(DataError):
        PackedLoader(dataset, 0)
    with pytest.raises(DataError, match="rank 2"):
        PackedLoader(dataset, 4, rank=2, world_size=2)


def test_resume_with_changed_data_or_seed_is_refused(dataset, small):
    state = PackedLoader(dataset, 4, seed=1).state_dict()
    with pytest.raises(DataError, match="windows"):
        PackedLoader(small, 4, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="seed"):
        PackedLoader(dataset, 4, seed=2).load_state_dict(state)


@pytest.mark.parametrize("before,after", [(1, 2), (4, 1), (2, 4)])
def test_resume_with_another_world_size_continues_the_stream(dataset, before, after):
    reference = batches(PackedLoader(dataset, 8, seed=7), 8)
    old = [PackedLoader(dataset, 8, seed=7, rank=r, world_size=before) for r in range(before)]
    for loader in old:
        batches(loader, 5)
    states = [loader.state_dict() for loader in old]
    assert all(s == states[0] for s in states)  # every rank saved the same position
    new = [PackedLoader(dataset, 8, seed=7, rank=r, world_size=after) for r in range(after)]
    for loader in new:
        loader.load_state_dict(states[0])
    for step in range(5, 8):
        parts = [loader.next_batch() for loader in new]
        assert torch.equal(torch.cat([p.input_ids for p in parts]), reference[step].input_ids)
        assert all(p.step == step for p in parts)


def test_a_damaged_shard_of_the_right_size_is_refused_when_read(tok, tmp_path):
    """Bytes changed after packing keep the size (opening checks sizes only; `data prepare` checks hashes): a token
    id beyond the tokenizer is refused naming the shard when its window is read, never looked up as an embedding."""
    pack(varied_docs(), tok, tmp_path / "p", seq_len=SEQ, shard_tokens=SEQ * 4)
    ds = PackedDataset(tmp_path / "p", "train")
    shard = ds.meta["splits"]["train"]["shards"][1]
    path = tmp_path / "p" / f"{shard['name']}.tokens.bin"
    data = bytearray(path.read_bytes())
    data[2 * SEQ + 6: 2 * SEQ + 8] = b"\xff\xff"  # second window of the shard, fourth token: id 65535
    path.write_bytes(bytes(data))
    damaged = PackedDataset(tmp_path / "p", "train")
    window = ds.meta["splits"]["train"]["shards"][0]["windows"] + 1
    damaged.windows(np.arange(window))  # the windows before it read as they are
    with pytest.raises(Failed, match=rf"{shard['name']}\.tokens\.bin: window {window} holds token id 65535, "
                                     rf"beyond the tokenizer's {tok.vocab_size}: the shard is damaged"):
        damaged.windows(np.array([0, window]))  # read mid-run, after steps: exit 1, work that failed
