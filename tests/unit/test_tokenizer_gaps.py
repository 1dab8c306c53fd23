"""A transformers encoder whose tokenizer has no mask token and whose ids leave a gap (the id a new mask would get is
another token's): fine-tuning and embedding, which never mask, read it without a mask; only what masks (data
prepare for MLM) refuses it, and no reader is given a mask id that is another token's. The folder's tokenizer is
built once for the check of its ids and the reader."""
from __future__ import annotations

import pytest
import torch
from conftest import run_command, write_classification_task
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

import encoderlab
from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import load_tokenizer

REFUSAL = r"no mask token, and the id '<mask>' would get, 258, is already the token"


@pytest.fixture(scope="module")
def gap_bert(tmp_path_factory):
    """A tiny BERT folder with a byte-level BPE tokenizer of ids 0, 1 and 3-258 (id 2 unused), no mask token: a mask
    added by counting the vocabulary would get 258, the last byte's id."""
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("gap") / "bert"
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    raw = Tokenizer(models.BPE({"<s>": 0, "</s>": 1, **{c: i + 3 for i, c in enumerate(alphabet)}}, []))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=260, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=128)).save_pretrained(str(folder))
    PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>").save_pretrained(str(folder))
    return folder


def test_a_reader_that_never_masks_gets_no_mask_and_the_last_token_keeps_its_id(gap_bert, tmp_path):
    with pytest.raises(DataError, match=REFUSAL):
        load_tokenizer(gap_bert, as_transformers=True)  # the default: the mask is needed
    tok = load_tokenizer(gap_bert, as_transformers=True, needs_mask=False)
    assert tok.mask_id is None and tok.added_tokens == [] and tok.vocab_size == 259
    assert tok.token(258) != "<mask>" and tok.special_ids == [0, 1]
    assert tok.info()["special_tokens"]["mask"] is None
    tok.save(tmp_path / "saved")  # a fine-tuned model's folder: saved without a mask token, and read back the same
    again = load_tokenizer(tmp_path / "saved", needs_mask=False)
    assert again.mask_id is None and again.encode_batch(["hello"]) == tok.encode_batch(["hello"])


def test_embedding_reads_it(gap_bert):
    assert tuple(encoderlab.load(gap_bert).embed(["hello world"]).shape) == (1, 32)


def test_fine_tuning_reads_it(gap_bert, tmp_path, monkeypatch, capsys):
    task = write_classification_task(tmp_path / "task")
    code, out, err = run_command(monkeypatch, capsys, "sweep", gap_bert, task, "--out", tmp_path / "evals",
                                 "--set", "max_steps=2", "--set", "lrs=[1e-3]", "--set", "seeds=[0]",
                                 "--workers", "1", home=tmp_path / "home")
    assert code == 0, err
    assert list((tmp_path / "evals").rglob("summary.json"))


def test_data_prepare_for_mlm_still_refuses_it(gap_bert, tmp_path, monkeypatch, capsys):
    (tmp_path / "corpus.txt").write_text("hello world\nanother document\n")
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "corpus.txt", "--tokenizer",
                                 gap_bert, "--seq-len", "64", "--out", tmp_path / "packed", home=tmp_path / "home")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no mask token, and the id '<mask>' would get, 258" in err
    assert not (tmp_path / "packed").exists()


def test_a_folder_is_read_with_its_tokenizer_built_once_and_checked(gap_bert, monkeypatch):
    """`transformers_config` builds the tokenizer to check its ids against the embeddings; the reader that needs
    both (fine-tuning, the API) is given that one, not a second built after it."""
    import encoderlab.data.tokenizer as tokenizer_module
    from encoderlab.runs import encoders

    built, checked = [], []
    real_load, real_check = tokenizer_module.load_tokenizer, encoders.check_tokenizer
    monkeypatch.setattr(tokenizer_module, "load_tokenizer", lambda *a, **k: built.append(a) or real_load(*a, **k))
    monkeypatch.setattr(encoders, "check_tokenizer", lambda *a: checked.append(a[0]) or real_check(*a))
    cfg, weights, tok = encoders.load_transformers_encoder(gap_bert)
    assert len(built) == 1 and checked == [tok]
