"""How packed documents attend: varlen buckets (CPU) and flex_attention (GPU) compute what the dense mask does."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.model.varlen import WORTH_IT, plan_segments
from encoderlab.train.distributed import World, prepare_model

CFG = ModelConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


def packed_docs(B: int, T: int, mean: float, seed: int) -> torch.Tensor:
    """Document ids of packed windows: random lengths, one-token documents included."""
    starts = torch.rand(B, T, generator=torch.Generator().manual_seed(seed)) < 1 / mean
    starts[:, 0] = True
    starts[0, 1:4] = True  # three one-token documents in a row
    return starts.long().cumsum(1) - 1


def run(model: TransformerLM, x: torch.Tensor, docs: torch.Tensor, causal: bool, varlen: bool):
    model.model.doc_attention = "varlen" if varlen else "dense"
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
    assert plan_segments(docs, causal).work < WORTH_IT  # the varlen path is taken
    x = torch.randint(0, CFG.vocab_size, docs.shape, generator=torch.Generator().manual_seed(2))
    out_v, grads_v = run(model, x, docs, causal, varlen=True)
    out_d, grads_d = run(model, x, docs, causal, varlen=False)
    torch.testing.assert_close(out_v, out_d, rtol=1e-5, atol=1e-5)  # fp32: only the summation order differs
    for name in grads_d:
        torch.testing.assert_close(grads_v[name], grads_d[name], rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():  # the no-grad path (flash forward) agrees as well
        model.model.doc_attention = "varlen"
        torch.testing.assert_close(model(x, causal=causal, doc_ids=docs), out_d, rtol=1e-5, atol=1e-5)


def test_plan_puts_every_position_back_once():
    docs = packed_docs(4, 96, mean=10, seed=3)
    plan = plan_segments(docs, causal=True)
    assert torch.equal(plan.gather[plan.scatter], torch.arange(docs.numel()))
    assert sum(n * L for n, L, _ in plan.buckets) == len(plan.gather)
    lengths = sorted(torch.unique_consecutive(docs.flatten() + 1000 * torch.arange(4).repeat_interleave(96),
                                              return_counts=True)[1].tolist())
    assert plan.work == pytest.approx(sum(n * L * L for n, L, _ in plan.buckets) / (4 * 96 * 96))
    assert plan.work >= sum(x * x for x in lengths) / (4 * 96 * 96)  # padding inside buckets only adds work


def test_one_long_document_keeps_the_dense_kernel():
    docs = torch.zeros(2, 32, dtype=torch.long)
    assert plan_segments(docs, causal=False).work == 1.0 >= WORTH_IT
    assert TransformerLM(CFG).model._plan_documents(docs, causal=False) is None  # auto: the dense mask path


def test_compile_switches_varlen_off():
    model = TransformerLM(CFG)
    train = SimpleNamespace(compile=True, activation_checkpointing=False, parallel="none", dtype="fp32",
                            attention="auto")
    prepare_model(model, train, World(), torch.device("cpu"))  # torch.compile is lazy: nothing compiles here
    assert model.model.doc_attention == "dense"


@pytest.mark.parametrize("T", [24, 200], ids=["eager-form", "flash-kernel"])
def test_sdpa_cpu_equals_sdpa_with_repeated_kv_heads(T):
    """Both forms sdpa_cpu picks (eager for short sequences under grad, flash otherwise) match the plain call."""
    from encoderlab.model.varlen import EAGER_MAX_LEN, sdpa_cpu

    assert (T <= EAGER_MAX_LEN) == (T == 24)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, T, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, T, 16, generator=g, requires_grad=True) for _ in range(2))
    mask = (torch.arange(T) < torch.tensor([[T], [T - 5]]))[:, None, None, :]  # padding in the second row
    got = sdpa_cpu(q, k, v, mask, False)
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
    """The GPU path's BlockMask (model/flex.py) allows what the dense mask allows. Checked with flex_attention's
    eager reference, forward only: CPU has no flex backward, and the compiled kernel needs a GPU to be worth it."""
    model = TransformerLM(CFG).eval()
    model.init_weights(0)
    docs = packed_docs(2, 96, mean=16, seed=4)
    x = torch.randint(0, CFG.vocab_size, docs.shape, generator=torch.Generator().manual_seed(5))
    model.model.doc_attention = "flex"
    flex = model(x, causal=causal, doc_ids=docs)
    model.model.doc_attention = "dense"
    torch.testing.assert_close(flex, model(x, causal=causal, doc_ids=docs), rtol=1e-5, atol=1e-5)


def test_unknown_doc_attention_is_refused():
    model = TransformerLM(CFG)
    model.model.doc_attention = "fast"
    with pytest.raises(ValueError, match="doc_attention must be one of"):
        model(torch.zeros(1, 8, dtype=torch.long), causal=True, doc_ids=torch.zeros(1, 8, dtype=torch.long))


def test_trainer_refuses_attention_kernels_the_device_or_compile_cannot_run():
    from pydantic import ValidationError

    from encoderlab.errors import EncoderlabError
    from encoderlab.train.config import TrainSection

    with pytest.raises(ValidationError, match="recompile the blocks every step"):
        TrainSection(steps=10, global_batch=8, attention="varlen", compile=True)
    train = TrainSection(steps=10, global_batch=8, attention="flex")
    with pytest.raises(EncoderlabError, match="flex needs a CUDA device"):
        prepare_model(TransformerLM(CFG), train, World(), torch.device("cpu"))
    model = TransformerLM(CFG)
    prepare_model(model, TrainSection(steps=10, global_batch=8, attention="varlen"), World(), torch.device("cpu"))
    assert model.model.doc_attention == "varlen"
