"""The fused LM head + cross-entropy equals the plain expression: loss, accuracy and both gradients."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from encoderlab.model import lm_loss
from encoderlab.model.lm_loss import fused_linear_cross_entropy


def _inputs(n=37, c=16, v=101, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, c, generator=g, requires_grad=True)
    w = (torch.randn(v, c, generator=g) * 0.5).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g)
    t[::3] = (h @ w.T).argmax(-1)[::3].detach()  # some rows predicted right, so accuracy is tested too
    return h, w, t


def _plain(h, w, t):
    logits = (h @ w.T).float()
    return F.cross_entropy(logits, t, reduction="sum"), (logits.argmax(-1) == t).sum()


@pytest.mark.parametrize("chunk_rows", [1, 5, 1000])  # one row per chunk, uneven chunks, a single chunk
def test_fp32_equals_the_plain_expression(monkeypatch, chunk_rows):
    monkeypatch.setattr(lm_loss, "CHUNK_BYTES", chunk_rows * 4 * 101)
    h, w, t = _inputs()
    loss, correct = fused_linear_cross_entropy(h, w, t)
    (loss * 0.37).backward()  # a non-unit incoming gradient, as the mean over tokens gives
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    ref_loss, ref_correct = _plain(h, w, t)
    (ref_loss * 0.37).backward()
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-5)
    assert int(correct) == int(ref_correct) > 0
    assert torch.allclose(gh, h.grad, rtol=1e-5, atol=1e-6) and torch.allclose(gw, w.grad, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_is_as_close_as_autocast_itself():
    h, w, t = _inputs(n=64, c=32, v=257)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = fused_linear_cross_entropy(h, w, t)
    loss.backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = h @ w.T
    ref = F.cross_entropy(logits.float(), t, reduction="sum")
    ref.backward()
    assert gh.dtype == torch.float32 and gw.dtype == torch.float32  # the inputs' dtypes
    assert abs(loss.item() - ref.item()) / ref.item() < 1e-3
    for ours, theirs in ((gh, h.grad), (gw, w.grad)):
        assert (ours - theirs).norm() / theirs.norm() < 2e-2  # bf16 products either way


def test_the_chunks_run_outside_autocast_in_the_compute_dtype(monkeypatch):
    """CUDA's autocast runs softmax in fp32: under it each chunk's (n, V) probabilities were written in fp32 and cast
    back for both products (15 of an 88 ms step on an H100). CPU's autocast keeps softmax in bf16, so this checks the
    cause instead: the chunk's softmax runs with autocast off, on bf16 logits."""
    seen = []

    def softmax(x, dim):
        seen.append((torch.is_autocast_enabled("cpu"), x.dtype))
        return torch.nn.functional.softmax(x, dim=dim)

    monkeypatch.setattr(lm_loss.torch, "softmax", softmax)
    h, w, t = _inputs(n=64, c=32, v=257)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = fused_linear_cross_entropy(h, w, t)
        assert torch.is_autocast_enabled("cpu")  # restored for the rest of the model
    loss.backward()
    assert seen and all(state == (False, torch.bfloat16) for state in seen)
    assert h.grad.dtype == torch.float32 and torch.isfinite(h.grad).all()


def test_without_grad_nothing_is_kept_and_no_rows_give_zero():
    h, w, t = _inputs()
    with torch.no_grad():
        loss, correct = fused_linear_cross_entropy(h, w, t)
    assert not loss.requires_grad and torch.allclose(loss, _plain(h, w, t)[0], rtol=1e-6)
    empty, none = fused_linear_cross_entropy(h[:0], w, t[:0])
    assert empty.item() == 0 and none.item() == 0


@pytest.mark.parametrize("card_gib, expected", [(24, 24 * 2**30 // 10), (141, lm_loss.CUDA_CHUNK_BYTES)])
def test_cuda_chunks_are_bounded_by_a_share_of_the_card(monkeypatch, card_gib, expected):
    """8 GiB chunks on a large card; a tenth of a small card's memory, so the loss's chunk never crowds it."""
    card = type("Card", (), {"total_memory": card_gib * 2**30})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: card)
    assert lm_loss._chunk_bytes(torch.device("cuda")) == expected
    assert lm_loss._chunk_bytes(torch.device("cpu")) == lm_loss.CHUNK_BYTES
