"""Tokenizers: trained BPE with fixed special ids, lossless round trips, special-token strings stay text, saved folders
load back (here and in transformers), and loaded tokenizers get the roles MLM needs."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import SPECIAL_TOKENS, TextTokenizer, load_tokenizer, train_bpe

CORPUS = [
    f"The {adj} {noun} walked to the {place} and said hello {i}."
    for i, (adj, noun, place) in enumerate(
        (a, n, p)
        for a in ("quick", "lazy", "happy", "sad", "green")
        for n in ("fox", "dog", "cat", "teacher", "student")
        for p in ("market", "river", "school", "station")
    )
] + ["Café crème, naïve façade, déjà vu.", "Emoji time 🎉🙂 and more 🎉.", "<mask> is just text here."] * 3

ROUND_TRIP = [
    "plain ASCII text, with punctuation: (a) [b] {c}; 42!",
    "Accents: café, naïve, Ångström, São Paulo, Zürich, ñandú.",
    "Emoji: 🎉🙂👍🏽 and a family 👨‍👩‍👧 plus CJK 漢字 and Cyrillic кошка.",
    "A review that quotes <mask> and <bos> and <eos> and <pad> inside the text.",
    "  leading and trailing spaces, tabs\tand\nnewlines  ",
]


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    return train_bpe(CORPUS, vocab_size=400)


def test_special_ids_are_0_to_3(tok):
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == (0, 1, 2, 3)
    assert [tok.token(i) for i in range(4)] == list(SPECIAL_TOKENS)
    assert tok.special_ids == [0, 1, 2, 3]


def test_vocab_size_respected(tok):
    assert 261 <= tok.vocab_size <= 400
    assert train_bpe(CORPUS * 3, vocab_size=300).vocab_size <= 300
    bigger = train_bpe(CORPUS, vocab_size=400, min_frequency=1)
    assert bigger.vocab_size > 300  # merges were learned, so the budget is really what limits


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_encode_round_trip(tok, text):
    [ids] = tok.encode_batch([text])
    assert tok.decode(ids) == text
    assert not set(ids) & set(tok.special_ids)  # no BOS/EOS added, no special id produced by text


def test_mask_string_in_text_is_not_the_mask_id(tok):
    [ids] = tok.encode_batch(["<mask>"])
    assert tok.mask_id not in ids and len(ids) > 1
    assert tok.decode(ids) == "<mask>"


def test_too_small_vocab():
    """Named as its caller wrote it: `--vocab-size 100` on the command line, `vocab_size=100` from the Python API."""
    from encoderlab.core.errors import CALLER

    with pytest.raises(DataError, match="^--vocab-size 100 is too small"):
        train_bpe(CORPUS, vocab_size=100)
    token = CALLER.set("api")
    try:
        with pytest.raises(DataError, match="^vocab_size=100 is too small"):
            train_bpe(CORPUS, vocab_size=100)
    finally:
        CALLER.reset(token)


def test_save_load_round_trip(tok, tmp_path):
    tok.save(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert (loaded.bos_id, loaded.eos_id, loaded.pad_id, loaded.mask_id) == (0, 1, 2, 3)
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.encode_batch(ROUND_TRIP) == tok.encode_batch(ROUND_TRIP)
    assert loaded.origin == tok.origin and loaded.added_tokens == []
    # The file itself loads too (roles then come from the token names).
    from_file = load_tokenizer(tmp_path / "tok" / "tokenizer.json")
    assert from_file.encode_batch(ROUND_TRIP) == tok.encode_batch(ROUND_TRIP)
    assert from_file.mask_id == 3
    # Saving did not switch off the "special strings are text" behaviour of the live tokenizer.
    assert tok.mask_id not in tok.encode_batch(["<mask>"])[0]


def test_saved_folder_loads_in_transformers(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save(tmp_path / "tok")
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf.mask_token == "<mask>" and hf.mask_token_id == 3
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (0, 1, 2)
    plain = ROUND_TRIP[:3]
    assert [hf(t, add_special_tokens=False)["input_ids"] for t in plain] == tok.encode_batch(plain)
    manifest = json.loads((tmp_path / "tok" / "encoderlab_tokenizer.json").read_text())
    assert manifest["mask_id"] == 3 and manifest["special_tokens"]["mask"] == "<mask>"


def _bpe_file(tmp_path, special_tokens: list[str], name: str = "tokenizer.json"):
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    raw.train_from_iterator(CORPUS, trainer=trainer)
    path = tmp_path / name
    raw.save(str(path))
    return path, raw


def test_missing_mask_is_added_and_recorded(tmp_path):
    path, raw = _bpe_file(tmp_path, ["<s>", "</s>", "<pad>"])
    before = raw.get_vocab_size(with_added_tokens=True)
    assert raw.token_to_id("<mask>") is None
    tok = load_tokenizer(path)
    assert tok.added_tokens == ["<mask>"]
    assert tok.mask_id == before and tok.vocab_size == before + 1  # one new row at the end
    assert tok.token(tok.mask_id) == "<mask>"
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (raw.token_to_id("<s>"), raw.token_to_id("</s>"),
                                                    raw.token_to_id("<pad>"))
    assert tok.mask_id not in tok.encode_batch(["a <mask> b"])[0]  # the added token is still not made from text
    # Saved and loaded again: the addition is remembered, not repeated.
    tok.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert again.added_tokens == ["<mask>"] and again.mask_id == tok.mask_id and again.vocab_size == before + 1


def test_missing_mask_is_refused_where_its_id_is_another_tokens(tmp_path):
    # A vocabulary with a gap (id 1 unused): tokenizers gives a new token the id that counts the vocabulary, 4
    # here, which "b" already holds; the mask would read b's embedding and text's "b" would read as the mask.
    raw = Tokenizer(models.WordLevel({"<s>": 0, "</s>": 2, "a": 3, "b": 4}, unk_token="a"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(DataError, match=r"no mask token.*would get, 4, is already the token 'b'"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_gpt2_style_single_special_token(tmp_path):
    path, raw = _bpe_file(tmp_path, ["<|endoftext|>"])
    eot = raw.token_to_id("<|endoftext|>")
    tok = load_tokenizer(path)
    assert tok.bos_id == tok.eos_id == tok.pad_id == eot
    assert tok.added_tokens == ["<|mask|>"]  # named in the tokenizer's own style
    assert tok.mask_id not in (eot,) and tok.token(tok.mask_id) == "<|mask|>"


def test_no_bos_no_eos_is_an_error(tmp_path):
    path, _ = _bpe_file(tmp_path, ["[UNUSED]"])
    with pytest.raises(DataError, match="neither a BOS nor an EOS"):
        load_tokenizer(path)


def test_missing_path(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_tokenizer(tmp_path / "nope" / "tokenizer.json")


def test_invalid_json(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{ this is not json")
    with pytest.raises(DataError) as info:
        load_tokenizer(bad)
    assert str(bad) in str(info.value)
    with pytest.raises(DataError):
        load_tokenizer(tmp_path)  # the folder holding it, same error


def test_folder_without_tokenizer(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError):
        load_tokenizer(tmp_path / "empty")
