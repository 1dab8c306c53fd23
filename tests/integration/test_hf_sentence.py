"""`export --as sentence-transformers`: `SentenceTransformer(folder)` loads with no warning and embeds every text as
encoderlab's retrieval evaluation does (framing, truncation at the context, mean pooling, prompts, cosine)."""
from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
import torch.nn.functional as F

from encoderlab.data.tokenizer import train_bpe
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.runs.checkpoint import save_weights_only
from encoderlab.tasks.base import pad
from encoderlab.tasks.bi_encoder import document_text, encode, query_text
from encoderlab.tasks.retrieval import RetrievalTask
from encoderlab.tasks.retrieval_data import Tokens

CONTEXT = 24  # short, so the long text below is cut: truncation must match too
TEXTS = ["the cat sat on the mat", "x", "a much longer sentence about many different things " * 4,
         "seven tall trees stand behind the white stone church"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, synthetic, one_thread):
    root = tmp_path_factory.mktemp("sentence")
    tok = train_bpe((d.text for d in synthetic(120)), 300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                      bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                      mask_token_id=tok.mask_id)
    model = TransformerLM(cfg).eval()
    model.init_weights(seed=3)
    save_weights_only(root / "ckpt", model.state_dict(), cfg, tok, {"step": 5, "reason": "final",
                                                                    "objective": "mlm40", "total_steps": 5})
    summary = export_checkpoint(root / "ckpt", root / "st", "sentence-transformers")
    return model, tok, root / "st", summary


def ours(model: TransformerLM, tok, texts: list[str]) -> torch.Tensor:
    """Unit-norm embeddings the way the retrieval task computes them (tokenise, pad, encode, normalise)."""
    tokens = Tokens(*RetrievalTask._tokenise(texts, tok, CONTEXT, lambda ids: [tok.bos_id, *ids, tok.eos_id])[:2])
    ids, mask = pad([tokens[i] for i in range(len(texts))], tok.pad_id)
    with torch.no_grad():
        return F.normalize(encode(model.model, ids, mask), dim=-1)


def test_loads_without_warnings_and_embeds_like_encoderlab(exported, caplog):
    from sentence_transformers import SentenceTransformer  # 4 s of import: paid by the worker that runs this only
    model, tok, folder, summary = exported
    assert summary["class"] == "EuroBertModel" and summary["as"] == "sentence-transformers"
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        st = SentenceTransformer(str(folder), device="cpu")
        got = st.encode(TEXTS, convert_to_tensor=True, normalize_embeddings=True, batch_size=3)
        queries = st.encode_query(TEXTS[:2], convert_to_tensor=True, normalize_embeddings=True)
        documents = st.encode_document(TEXTS[2:], convert_to_tensor=True, normalize_embeddings=True)
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert st.max_seq_length == CONTEXT and st.similarity_fn_name == "cosine"
    assert len(tok.encode_batch([TEXTS[2]])[0]) > CONTEXT  # the long text is really cut
    assert (got - ours(model, tok, TEXTS)).abs().max() <= 1e-5
    assert (queries - ours(model, tok, [query_text(t) for t in TEXTS[:2]])).abs().max() <= 1e-5
    assert (documents - ours(model, tok, [document_text("", t) for t in TEXTS[2:]])).abs().max() <= 1e-5
    want = ours(model, tok, [query_text(TEXTS[0])]) @ ours(model, tok, [document_text("", TEXTS[3])]).T
    assert abs(float(st.similarity(queries[:1], documents[1:])) - float(want)) <= 1e-5


def test_folder_and_card_describe_a_sentence_encoder(exported):
    _, _, folder, _ = exported
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and pooling["word_embedding_dimension"] == 64
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["EuroBertModel"]  # no MLM head for AutoModel to leave unused
    card = (folder / "README.md").read_text()
    assert "library_name: sentence-transformers" in card and "pipeline_tag: sentence-similarity" in card
    assert "SentenceTransformer(" in card and "fill-mask" not in card
