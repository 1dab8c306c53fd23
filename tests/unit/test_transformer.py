"""Meaning of the backbone: causality, document isolation, per-document positions, sparse head, padding,
presets."""
from __future__ import annotations

import pathlib

import pytest
import torch
from pydantic import ValidationError

from encoderlab.core.errors import EncoderlabError
from encoderlab.model import transformer as transformer_module
from encoderlab.model.attention import build_attention_mask
from encoderlab.model.config import ModelConfig
from encoderlab.model.presets import PRESETS, preset
from encoderlab.model.transformer import (
    Transformer,
    TransformerLM,
    count_parameters,
    positions_from_doc_ids,
)

CFG = ModelConfig(
    vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2,
)


def make(cls=Transformer, cfg: ModelConfig = CFG, seed: int = 0):
    model = cls(cfg).eval()
    model.init_weights(seed)
    return model


def ids(B: int = 2, T: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def changed_at(x: torch.Tensor, positions) -> torch.Tensor:
    y = x.clone()
    y[:, positions] = (y[:, positions] + 1) % CFG.vocab_size
    return y


def moved(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-position max abs change, (B, T)."""
    return (a - b).abs().amax(dim=-1)


# ---- causality ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0, 5, 10])
@torch.no_grad()
def test_causal_future_token_does_not_move_the_past(t):
    model, x = make(), ids()
    delta = moved(model(x, causal=True), model(changed_at(x, t + 1), causal=True))
    assert delta[:, : t + 1].max() == 0
    assert (delta[:, t + 1] > 1e-4).all()


@pytest.mark.parametrize("t", [0, 5, 10])
@torch.no_grad()
def test_bidirectional_future_token_moves_the_past(t):
    model, x = make(), ids()
    delta = moved(model(x, causal=False), model(changed_at(x, t + 1), causal=False))
    assert (delta[:, t] > 1e-4).all()
    assert (delta[:, : t + 1] > 1e-4).all()


@torch.no_grad()
def test_causal_flag_is_per_call_on_one_module():
    model, x = make(), ids()
    assert not torch.allclose(model(x, causal=True), model(x, causal=False))
    # With one layer the last token sees the same keys either way, so only the mask differs between the calls.
    one = make(cfg=ModelConfig(**{**CFG.model_dump(), "num_hidden_layers": 1}))
    assert torch.allclose(one(x, causal=True)[:, -1], one(x, causal=False)[:, -1], atol=1e-5)


@torch.no_grad()
def test_explicit_mask_paths_equal_fused_paths():
    """An all-ones padding mask or a single document builds a mask; results equal SDPA's fused paths."""
    model, x = make(), ids()
    ones, one_doc = torch.ones_like(x), torch.zeros_like(x)
    for causal in (True, False):
        ref = model(x, causal=causal)
        assert torch.allclose(model(x, causal=causal, attention_mask=ones), ref, atol=1e-5)
        assert torch.allclose(model(x, causal=causal, doc_ids=one_doc), ref, atol=1e-5)


# ---- documents ---------------------------------------------------------------------------------------------

DOCS = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2], [7, 7, 7, 3, 3, 3, 3, 3, 3, 3, 9, 9]])


def test_positions_restart_at_each_document():
    want = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 0, 1]])
    assert torch.equal(positions_from_doc_ids(DOCS), want)


@pytest.mark.parametrize("causal", [True, False], ids=["block-causal", "block-diagonal"])
@torch.no_grad()
def test_documents_do_not_see_each_other(causal):
    model, x = make(), ids()
    base = model(x, causal=causal, doc_ids=DOCS)
    for b, doc in [(0, 1), (1, 3)]:
        in_doc = DOCS[b] == doc
        x2 = x.clone()
        x2[b, in_doc] = (x2[b, in_doc] + 1) % CFG.vocab_size  # change every token of document A
        delta = moved(model(x2, causal=causal, doc_ids=DOCS), base)
        assert delta[b, ~in_doc].max() == 0, "another document moved"
        assert delta[1 - b].max() == 0, "another row moved"
        assert (delta[b, in_doc] > 1e-4).any()


@pytest.mark.parametrize("causal", [True, False])
@torch.no_grad()
def test_document_at_offset_equals_document_alone(causal):
    model = make()
    doc = ids(B=1, T=5, seed=3)
    before, after = ids(B=1, T=4, seed=4), ids(B=1, T=3, seed=5)
    packed = torch.cat([before, doc, after], dim=1)  # the document sits at offset 4
    doc_ids = torch.tensor([[0] * 4 + [1] * 5 + [2] * 3])
    got = model(packed, causal=causal, doc_ids=doc_ids)[:, 4:9]
    alone = model(doc, causal=causal)
    assert (got - alone).abs().max() <= 1e-5


def test_mask_is_block_diagonal_and_block_causal():
    d = torch.tensor([[0, 0, 1, 1, 1]])
    bidir = build_attention_mask(False, d)[0, 0]
    causal = build_attention_mask(True, d)[0, 0]
    block = torch.tensor(
        [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 1, 1, 1]],
        dtype=torch.bool,
    )
    assert torch.equal(bidir, block)
    assert torch.equal(causal, block & torch.ones(5, 5, dtype=torch.bool).tril())
    assert build_attention_mask(True) is None and build_attention_mask(False) is None


# ---- sparse LM head ----------------------------------------------------------------------------------------


@torch.no_grad()
def test_sparse_head_equals_dense_logits_at_positions():
    lm, x = make(TransformerLM), ids()
    where = torch.zeros_like(x, dtype=torch.bool)
    where[0, [1, 4, 11]] = True
    where[1, [0, 7]] = True
    for causal in (True, False):
        dense = lm(x, causal=causal, doc_ids=DOCS)  # (B, T, V)
        by_mask = lm(x, causal=causal, doc_ids=DOCS, output_positions=where)  # (N, V)
        by_index = lm(x, causal=causal, doc_ids=DOCS, output_positions=where.flatten().nonzero().squeeze(1))
        assert by_mask.shape == (5, CFG.vocab_size)
        assert torch.allclose(by_mask, dense[where], atol=1e-6)
        assert torch.allclose(by_index, dense[where], atol=1e-6)


def test_mismatched_shapes_are_rejected():
    model, x = make(), ids()
    with pytest.raises(ValueError, match="doc_ids has shape"):
        model(x, causal=False, doc_ids=DOCS[:1])
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model(x, causal=True, attention_mask=torch.ones(2, 5))


def test_sparse_head_rejects_bad_positions():
    lm, x = make(TransformerLM), ids()
    with pytest.raises(ValueError, match="shape"):
        lm(x, causal=False, output_positions=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="1-D"):
        lm(x, causal=False, output_positions=torch.zeros(2, 12, dtype=torch.long))


# ---- padding -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("causal", [True, False])
def test_no_nan_with_padding(side, causal):
    lm, x = make(TransformerLM), ids(B=3)
    mask = torch.ones_like(x)
    n_pad = [4, 11, 12]  # the last row is padding only
    for b, n in enumerate(n_pad):
        if side == "left":
            mask[b, :n] = 0
        else:
            mask[b, x.shape[1] - n :] = 0
    lm.train()
    logits = lm(x, causal=causal, attention_mask=mask)
    assert torch.isfinite(logits).all()
    (logits * mask[..., None]).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in lm.parameters() if p.grad is not None)
    # and with documents on top of padding
    with torch.no_grad():
        assert torch.isfinite(lm(x, causal=causal, attention_mask=mask, doc_ids=DOCS[:1].expand(3, -1))).all()


# ---- init, dtype, structure --------------------------------------------------------------------------------


def test_init_is_reproducible_and_follows_config():
    a, b = make(TransformerLM, seed=7), make(TransformerLM, seed=7)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p))
    wide = ModelConfig(**{**CFG.model_dump(), "hidden_size": 256, "initializer_range": 0.05})
    big = make(TransformerLM, wide)
    assert abs(big.lm_head.weight.std().item() - 0.05) < 0.003


def test_tied_embeddings_share_one_matrix():
    lm = make(TransformerLM, ModelConfig(**{**CFG.model_dump(), "tie_word_embeddings": True}))
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    assert count_parameters(lm) == lm.config.num_parameters()


def test_meta_device_then_materialise():
    with torch.device("meta"):
        lm = TransformerLM(CFG)
    lm.to_empty(device="cpu")
    lm.init_weights(seed=0)
    with torch.no_grad():
        assert torch.isfinite(lm(ids(), causal=False)).all()


def test_bf16_autocast_runs():
    lm, x = make(TransformerLM), ids()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = lm(x, causal=True, doc_ids=DOCS)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_model_code_stays_out_of_distributed_and_compile():
    folder = pathlib.Path(transformer_module.__file__).parent
    for name in ("transformer.py", "attention.py"):  # the forward and its attention kernels
        source = (folder / name).read_text()
        assert "torch.distributed" not in source and "torch.compile" not in source, name


def test_gqa_shapes_and_no_biases():
    lm = make(TransformerLM)
    attn = lm.model.layers[0].self_attn
    assert attn.k_proj.weight.shape == (2 * CFG.head_size, CFG.hidden_size)
    assert all(m.bias is None for m in lm.modules() if isinstance(m, torch.nn.Linear))


# ---- config and presets ------------------------------------------------------------------------------------

# (name, layers, hidden, FFN, heads, KV heads) from docs/paper.md#architecture; total parameters with an untied head,
# vocab 128,256.
PAPER_TABLE = [
    pytest.param("210m", 12, 768, 3072, 12, 12, 310_266_624, id="210m-310.27M-params-113.27M-non-embedding"),
    pytest.param("610m", 26, 1152, 4096, 18, 6, 755_625_600, id="610m-755.63M-params-460.12M-non-embedding"),
    pytest.param("1b", 28, 1728, 5120, 18, 6, 1_409_482_944, id="1b-1409.48M-params-966.23M-non-embedding"),
]


@pytest.mark.parametrize(("name", "layers", "hidden", "ffn", "heads", "kv", "total"), PAPER_TABLE)
def test_paper_presets_have_the_paper_shapes(name, layers, hidden, ffn, heads, kv, total):
    cfg = preset(name)
    with torch.device("meta"):
        lm = TransformerLM(cfg)
    V, hd = 128_256, hidden // heads
    want = {
        "model.embed_tokens.weight": (V, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (V, hidden),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        want |= {
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * hd, hidden),
            p + "self_attn.k_proj.weight": (kv * hd, hidden),
            p + "self_attn.v_proj.weight": (kv * hd, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * hd),
            p + "mlp.gate_proj.weight": (ffn, hidden),
            p + "mlp.up_proj.weight": (ffn, hidden),
            p + "mlp.down_proj.weight": (hidden, ffn),
        }
    got = {k: tuple(v.shape) for k, v in lm.state_dict().items()}
    assert got == want
    assert count_parameters(lm) == cfg.num_parameters() == total
    print(f"{name}: {total / 1e6:.2f}M parameters, {cfg.num_parameters(include_embeddings=False) / 1e6:.2f}M "
          "non-embedding")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_and_counts(name):
    cfg = preset(name)
    with torch.device("meta"):
        lm = TransformerLM(cfg)
    assert count_parameters(lm) == cfg.num_parameters()
    assert cfg.num_parameters(include_embeddings=False) < cfg.num_parameters()


def test_tiny_is_a_cpu_demo_size():
    assert 1e6 < preset("tiny").num_parameters(include_embeddings=False) < 1e7


def test_preset_errors_and_overrides():
    with pytest.raises(EncoderlabError, match="available: micro, tiny, mini, 210m, 610m, 1b"):
        preset("huge")
    assert preset("tiny", vocab_size=500).vocab_size == 500
    with pytest.raises(EncoderlabError, match="num_key_value_heads"):
        preset("610m", num_key_value_heads=4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": 66}, "divisible by num_attention_heads"),
        ({"num_key_value_heads": 3}, "divisible by num_key_value_heads"),
        ({"hidden_size": 72, "num_attention_heads": 8}, "must be even"),
        ({"num_hidden_layers": 0}, "greater than 0"),
        ({"mask_token_id": 101}, "outside the vocabulary"),
        ({"dropout": 0.1}, "Extra inputs are not permitted"),
    ],
)
def test_config_rejects_bad_values_with_clear_messages(change, message):
    with pytest.raises(ValidationError, match=message):
        ModelConfig(**{**CFG.model_dump(), **change})


def test_flops_per_token_formula():
    cfg = preset("210m")
    norms = (2 * cfg.num_hidden_layers + 1) * cfg.hidden_size
    n_matmul = cfg.num_parameters(include_embeddings=False) - norms
    head = cfg.hidden_size * cfg.vocab_size
    attn = 4 * cfg.num_hidden_layers * cfg.hidden_size * 2048
    assert cfg.flops_per_token(2048, causal=False) == 3 * (2 * n_matmul + 2 * head + attn)
    assert cfg.flops_per_token(2048, causal=False, training=False, head_fraction=0.4) == pytest.approx(
        2 * n_matmul + 0.8 * head + attn
    )
    assert cfg.flops_per_token(2048, causal=True) < cfg.flops_per_token(2048, causal=False)
