"""Attention backends (model/attention.py): varlen buckets (CPU) and flex_attention (GPU) compute what the dense mask
does, each form of the dense backend computes what SDPA does, and the trainer chooses the backend once per run."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from encoderlab.model.attention import (
    WORTH_IT,
    Dense,
    DenseLayout,
    Flex,
    Varlen,
    attend,
    document_block_mask,
    for_pretraining,
    segment_layout,
)
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM

CFG = ModelConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


def packed_docs(B: int, T: int, mean: float, seed: int) -> torch.Tensor:
    """Document ids of packed windows: random lengths, one-token documents included."""
    starts = torch.rand(B, T, generator=torch.Generator().manual_seed(seed)) < 1 / mean
    starts[:, 0] = True
    starts[0, 1:4] = True  # three one-token documents in a row
    return starts.long().cumsum(1) - 1


def run(model: TransformerLM, x: torch.Tensor, docs: torch.Tensor, causal: bool, varlen: bool):
    model.model.attention = Varlen(Dense("flash"), fallback=False) if varlen else Dense("flash")
    model.zero_grad()
    out = model(x, causal=causal, doc_ids=docs)
    out.square().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("causal", [True, False], ids=["block-causal", "block-diagonal"])
def test_varlen_equals_dense_mask_outputs_and_gradients(causal):
    torch.manual_seed(0)
    model = TransformerLM(CFG)
    model.init_weights(0)
    docs = packed_docs(2, 256, mean=20, seed=1)
    assert segment_layout(docs, causal).work < WORTH_IT  # the varlen path is taken
    x = torch.randint(0, CFG.vocab_size, docs.shape, generator=torch.Generator().manual_seed(2))
    out_v, grads_v = run(model, x, docs, causal, varlen=True)
    out_d, grads_d = run(model, x, docs, causal, varlen=False)
    torch.testing.assert_close(out_v, out_d, rtol=1e-5, atol=1e-5)  # fp32: only the summation order differs
    for name in grads_d:
        torch.testing.assert_close(grads_v[name], grads_d[name], rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():  # without gradients as well
        model.model.attention = Varlen(Dense("flash"), fallback=False)
        torch.testing.assert_close(model(x, causal=causal, doc_ids=docs), out_d, rtol=1e-5, atol=1e-5)


def test_plan_puts_every_position_back_once():
    docs = packed_docs(4, 96, mean=10, seed=3)
    plan = segment_layout(docs, causal=True)
    assert torch.equal(plan.gather[plan.scatter], torch.arange(docs.numel()))
    assert sum(n * L for n, L, _ in plan.buckets) == len(plan.gather)
    lengths = sorted(torch.unique_consecutive(docs.flatten() + 1000 * torch.arange(4).repeat_interleave(96),
                                              return_counts=True)[1].tolist())
    assert plan.work == pytest.approx(sum(n * L * L for n, L, _ in plan.buckets) / (4 * 96 * 96))
    assert plan.work >= sum(x * x for x in lengths) / (4 * 96 * 96)  # padding inside buckets only adds work


def choose(train, seq_len: int):
    return for_pretraining(train.attention, torch.device("cpu"), seq_len)


def test_one_long_document_keeps_the_dense_kernel():
    docs = torch.zeros(2, 32, dtype=torch.long)
    assert segment_layout(docs, causal=False).work == 1.0 >= WORTH_IT
    auto = Varlen(Dense("flash"), fallback=True)  # train.attention: auto on CPU
    assert isinstance(auto.layout(False, docs, None), DenseLayout)  # the dense mask path


def test_compile_keeps_varlen_on_cpu():
    """On CPU compile goes around the attention (pretraining/distributed.py), so the bucket layout stays."""
    for kind in ("auto", "varlen"):
        train = SimpleNamespace(compile=True, attention=kind)
        assert choose(train, 512) == Varlen(Dense("flash"), fallback=kind == "auto")


def test_compile_on_cpu_goes_around_the_attention():
    """Each block compiles in two pieces, its own forward stays eager and calls the attention between them (the run's
    compiled losses equal the eager run's: tests/distributed/test_parallel.py, slow)."""
    from encoderlab.pretraining.distributed import World, prepare_model

    cpu = torch.device("cpu")
    model = TransformerLM(CFG, for_pretraining("auto", cpu, 64))
    train = SimpleNamespace(activation_checkpointing=False, compile=True, parallel="none")
    prepare_model(model, train, World(), cpu)
    for block in model.model.layers:
        assert not hasattr(vars(block).get("forward"), "_torchdynamo_orig_callable")
        for piece in ("before_attention", "after_attention"):
            assert vars(block)[piece]._torchdynamo_orig_callable == getattr(type(block), piece).__get__(block)


@pytest.mark.parametrize("form", ["eager", "flash", "repeat-kv"])
def test_every_form_equals_sdpa_with_repeated_kv_heads(form):
    """Each kernel the caller may choose computes what SDPA computes, gradients included."""
    T = 24
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, T, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, T, 16, generator=g, requires_grad=True) for _ in range(2))
    mask = (torch.arange(T) < torch.tensor([[T], [T - 5]]))[:, None, None, :]  # padding in the second row
    got = attend(form, q, k, v, mask, False)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                            attn_mask=mask)
    want_grads = torch.autograd.grad(want.square().sum(), (q, k, v))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["block-causal", "block-diagonal"])
@torch.no_grad()
def test_flex_block_mask_equals_dense_mask(causal):
    """The GPU path's BlockMask (model/attention.py `Flex`) allows what the dense mask allows. Checked with
    flex_attention's eager reference, forward only: CPU has no flex backward, and the compiled kernel needs a GPU
    to be worth it."""
    model = TransformerLM(CFG).eval()
    model.init_weights(0)
    docs = packed_docs(2, 96, mean=16, seed=4)
    x = torch.randint(0, CFG.vocab_size, docs.shape, generator=torch.Generator().manual_seed(5))
    model.model.attention = Flex()
    flex = model(x, causal=causal, doc_ids=docs)
    model.model.attention = Dense("flash")
    torch.testing.assert_close(flex, model(x, causal=causal, doc_ids=docs), rtol=1e-5, atol=1e-5)


def tile_sets(block_mask, full: bool) -> list[list[set[int]]]:
    counts = block_mask.full_kv_num_blocks if full else block_mask.kv_num_blocks
    indices = block_mask.full_kv_indices if full else block_mask.kv_indices
    return [[set(indices[b, 0, i, :counts[b, 0, i]].tolist()) for i in range(counts.shape[2])]
            for b in range(counts.shape[0])]


@pytest.mark.parametrize("causal", [True, False], ids=["block-causal", "block-diagonal"])
@pytest.mark.parametrize("mean", [40, 300, 5000], ids=["short-docs", "long-docs", "one-doc"])
def test_document_block_mask_is_create_block_mask(causal, mean):
    """The tiles computed from document ids (model/attention.py `document_block_mask`) are exactly those
    create_block_mask finds by evaluating the mask on every pair: which are skipped, partial and full."""
    from torch.nn.attention.flex_attention import create_block_mask

    docs = packed_docs(3, 1024, mean=mean, seed=mean)

    def same_document(b, h, q, kv):
        allowed = docs[b, q] == docs[b, kv]
        return allowed & (q >= kv) if causal else allowed

    got = document_block_mask(docs, causal, same_document)
    want = create_block_mask(same_document, 3, None, 1024, 1024, device="cpu")
    for full in (False, True):
        assert tile_sets(got, full) == tile_sets(want, full)
    torch.testing.assert_close(got.to_dense(), want.to_dense())


@pytest.mark.parametrize("causal", [True, False], ids=["block-causal", "block-diagonal"])
@torch.no_grad()
def test_flex_with_tiles_from_document_ids_equals_dense_mask(causal):
    """At a length that is a multiple of the tile, Flex takes document_block_mask; unsorted document ids too (a
    tile whose id range overlaps another's without a shared document is partial: mask_mod still decides)."""
    model = TransformerLM(CFG).eval()
    model.init_weights(0)
    docs = packed_docs(2, 256, mean=30, seed=6)
    docs[1] = docs[1][torch.randperm(256, generator=torch.Generator().manual_seed(7))]  # ids in no order
    x = torch.randint(0, CFG.vocab_size, docs.shape, generator=torch.Generator().manual_seed(8))
    model.model.attention = Flex()
    flex = model(x, causal=causal, doc_ids=docs)
    model.model.attention = Dense("flash")
    torch.testing.assert_close(flex, model(x, causal=causal, doc_ids=docs), rtol=1e-5, atol=1e-5)


def test_unknown_form_is_refused():
    with pytest.raises(ValueError, match="attention form must be one of"):
        Dense("fast")


def test_trainer_refuses_attention_kernels_the_device_cannot_run():
    from encoderlab.core.errors import EncoderlabError
    from encoderlab.pretraining.config import TrainSection

    train = TrainSection(steps=10, global_batch=8, attention="flex")
    with pytest.raises(EncoderlabError, match="flex needs a CUDA device"):
        choose(train, 512)
    varlen = choose(TrainSection(steps=10, global_batch=8, attention="varlen"), 512)
    assert varlen == Varlen(Dense("flash"), fallback=False)


@pytest.mark.parametrize("seq_len, form", [(128, "eager"), (512, "flash")])
def test_trainer_chooses_one_backend_per_run(seq_len, form):
    """auto on CPU: varlen buckets where they save work, else the dense form measured fastest for the run's
    window length, whether or not gradients are on."""
    from encoderlab.pretraining.config import TrainSection

    for kind, want in (("auto", Varlen(Dense(form))), ("dense", Dense(form))):
        train = TrainSection(steps=10, global_batch=8, attention=kind)
        assert choose(train, seq_len) == want


def test_the_model_has_no_attention_modes_and_ignores_gradients():
    """The backend is the model's only attention state, and a forward computes the same with gradients on or off."""
    model = TransformerLM(CFG, Dense("eager"))
    model.init_weights(0)
    assert {k for k in vars(model.model) if not k.startswith("_")} == {"config", "attention", "training"}
    x = torch.randint(0, CFG.vocab_size, (2, 16), generator=torch.Generator().manual_seed(6))
    pad = torch.ones(2, 16, dtype=torch.long)
    pad[1, 10:] = 0
    with torch.no_grad():
        scored = model(x, causal=False, attention_mask=pad)
    assert torch.equal(model(x, causal=False, attention_mask=pad).detach(), scored)
