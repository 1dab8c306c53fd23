"""Cross-entropy of the LM head without materialising the logits' autograd graph: a fused linear + cross-entropy.

The plain way, `F.cross_entropy(lm_head(h).float(), t)`, keeps the (N, V) logits, writes an fp32 copy of them,
runs log-softmax, and in the backward writes the fp32 gradient of the log-softmax and its bf16 copy before the two
matrix products. With a 32K vocabulary and 4K predicted tokens each of those is 0.3-0.5 GB of memory traffic per
step; with the paper's 128K vocabulary on GPU they are the largest tensors of the step.

Here the gradient is computed in the forward, chunk by chunk of rows, while the chunk's logits are at hand
(the approach of Liger-Kernel's fused linear cross-entropy): logits = h_c W^T in the compute dtype, softmax with
fp32 statistics, then d/dlogits = softmax - onehot is multiplied into dh_c = g_c W and dW += g_c^T h_c. Only dh
(N, C) and dW (V, C) are kept for the backward, which scales them by the incoming gradient. Chunks bound the
logits and probabilities to `CHUNK_BYTES` whatever the batch.

Returns the *summed* loss over rows and the number of rows whose target has the largest logit (accuracy; a tie
with another token counts as correct, where `argmax` would pick the lower id). Used by `TransformerLM.forward`
when it is given `targets`, so that FSDP's and DDP's forward hooks see the head's weight being used.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from encoderlab.model import lm_loss_kernel

CHUNK_BYTES = 1 << 28  # bounds a chunk's rows: 2,048 rows of a 32K vocabulary (logits + probabilities: 256 MiB in bf16)
# On CUDA each chunk adds its (V, C) weight gradient into the fp32 accumulator, a pass over 3 x V x C x 4 bytes that
# does not shrink with the chunk: with 523 rows of a 128K vocabulary (the CPU bound) those passes and the softmax
# launches took 58 of a 108 ms step (210m CLM, 8 x 2,048 tokens, H100, compiled blocks; profiled). Chunks of up to
# 8 GiB (16,744 rows of a 128K vocabulary: one chunk for 8 x 2,048 tokens) made the 210m's compiled step 1.03x faster
# than 2 GiB ones (H200, both objectives) for 6 GB more peak memory; a tenth of the card's memory bounds them on
# smaller cards.
CUDA_CHUNK_BYTES = 1 << 33
CUDA_CHUNK_SHARE = 10


def _chunk_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return CHUNK_BYTES
    return min(CUDA_CHUNK_BYTES, torch.cuda.get_device_properties(device).total_memory // CUDA_CHUNK_SHARE)


def _compute_dtype(h: Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(h.device.type):
        return torch.get_autocast_dtype(h.device.type)
    return h.dtype


def _chunk(hc_all: Tensor, w: Tensor, targets: Tensor, start: int, rows: int, loss: Tensor, correct: Tensor,
           grad_h: Tensor | None, grad_w: Tensor | None) -> None:
    """Rows [start, start + rows): add their loss and right predictions, write their d/dh and add their d/dW."""
    hc, tc = hc_all[start:start + rows], targets[start:start + rows]
    logits = hc @ w.T  # (n_c, V), compute dtype
    if logits.is_cuda and lm_loss_kernel.available():
        lse, top_logit, target_logit = lm_loss_kernel.softmax_minus_onehot_(logits, tc, grad_h is not None)
        grad = logits  # written over
    else:
        lse, top_logit, target_logit, grad = softmax_minus_onehot(logits, tc, grad_h is not None)
    loss += (lse - target_logit).sum()
    correct += (target_logit >= top_logit).sum()
    if grad_h is not None:
        grad_h[start:start + rows] = grad @ w
        grad_w += grad.T @ hc


def softmax_minus_onehot(logits: Tensor, targets: Tensor, want_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(lse, largest logit, target's logit) per row in fp32, and softmax - onehot (d/dlogits) when `want_grad`.

    The torch ops that `lm_loss_kernel.softmax_minus_onehot_` does in one kernel, for every device it does not run on.
    """
    tc = targets[:, None]
    # Values only: max with its indices took 78 ms of a 1.7 s micro CLM step on CPU (amax: 6-20 ms).
    top_logit = logits.amax(dim=-1, keepdim=True)
    # One fused softmax kernel: fp32 inside, written once in the compute dtype (the gradient's dtype). An
    # fp32 log-softmax, its exp and a cast back cost 3-4x more on CPU (0.3 s of a 5 s mini CLM step).
    probs = torch.softmax(logits, dim=-1)
    # The log-sum-exp from the most likely token: its probability is >= 1/V, so it never underflows, and
    # log p = logit - lse gives lse to the rounding of that one probability (in bf16 2^-9 relative, at
    # most 0.002 on a row's loss, unbiased; exact to fp32 rounding in fp32). Softmax keeps the order, so the
    # largest probability is that token's (gathering it at the argmax gave the same bits, fp32 and bf16).
    lse = top_logit.float() - probs.amax(dim=-1, keepdim=True).float().log()
    target_logit = logits.gather(1, tc)
    if want_grad:
        # Softmax minus the one-hot target, written at the n_c target entries only: scatter_add_ on a bf16
        # (n_c, V) tensor converts all of it to fp32 and back on CPU (0.1 s a chunk at mini).
        at = (torch.arange(len(tc), device=tc.device), tc[:, 0])
        probs.index_put_(at, probs[at] - 1)
    return lse[:, 0], top_logit[:, 0].float(), target_logit[:, 0].float(), probs


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, targets: Tensor, dtype: torch.dtype, want_grad: bool):
        hc_all, w = h.to(dtype), weight.to(dtype)
        n, vocab = h.shape[0], weight.shape[0]
        rows = max(1, _chunk_bytes(h.device) // (4 * vocab))
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        correct = torch.zeros((), dtype=torch.int64, device=h.device)
        grad_h = torch.empty_like(hc_all) if want_grad else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device) if want_grad else None
        # Autocast off: every operand is already in `dtype`. CUDA's autocast runs softmax in fp32, so the (n_c, V)
        # probabilities were written in fp32 and cast back to bf16 for each of the two products: three extra passes
        # over the largest tensor of the step, 15 of an 88 ms step (210m CLM, 8 x 2,048 tokens, H100, profiled).
        autocast = torch.is_autocast_enabled(h.device.type)
        with torch.autocast(h.device.type, enabled=False) if autocast else contextlib.nullcontext():
            for start in range(0, n, rows):
                _chunk(hc_all, w, targets, start, rows, loss, correct, grad_h, grad_w)
        if want_grad:
            ctx.save_for_backward(grad_h, grad_w)
            ctx.dtypes = h.dtype, weight.dtype
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_correct):
        grad_h, grad_w = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        return (grad_h * grad_loss).to(h_dtype), (grad_w * grad_loss).to(w_dtype), None, None, None


def fused_linear_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(summed cross-entropy, number of rows predicted right) of `h @ weight.T` against `targets`.

    h (N, C) hidden states, weight (V, C) the LM head, targets (N,) token ids (no ignore index: pass only the rows
    that are predicted). The matrix products run in the autocast dtype when autocast is on, else in h's dtype;
    softmax statistics are fp32. Under torch.compile the plain expression is used (inductor fuses it itself).
    """
    if torch.compiler.is_compiling():
        logits = (h @ weight.T).float()
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        target_logit = logits.gather(1, targets[:, None])
        return loss, (target_logit >= logits.amax(dim=-1, keepdim=True)).sum()
    want_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    loss, correct = _FusedLinearCrossEntropy.apply(h, weight, targets, _compute_dtype(h), want_grad)
    return loss, correct
