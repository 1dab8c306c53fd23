"""The Triton pass of the LM loss (model/lm_loss_kernel.py) equals the torch ops it replaces on CUDA.

Triton's interpreter runs the kernel on the CPU, in a subprocess because it is chosen when the kernel is defined.
CPU builds of torch do not ship Triton: there the test is skipped (`pip install triton` runs it); `make gpu-check`'s
lm-loss section checks the compiled kernel against float64 on the GPU.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = """
import torch
from encoderlab.model import lm_loss_kernel
from encoderlab.model.lm_loss import softmax_minus_onehot
assert lm_loss_kernel.available()
g = torch.Generator().manual_seed(1)
for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 4e-3)):
    for n, vocab in ((5, 300), (7, 4096), (3, 9000)):  # under, at and over one block, a partial last block
        logits = (torch.randn(n, vocab, generator=g) * 4).to(dtype)
        targets = torch.randint(0, vocab, (n,), generator=g)
        lse_ref, top_ref, target_ref, grad_ref = softmax_minus_onehot(logits.clone(), targets, True)
        exact = torch.logsumexp(logits.double(), -1)
        got = logits.clone()
        lse, top, target_logit = lm_loss_kernel.softmax_minus_onehot_(got, targets, True)
        assert torch.equal(top, top_ref) and torch.equal(target_logit, target_ref)
        assert (lse.double() - exact).abs().max() < 1e-5, (dtype, n, vocab)
        assert (lse - lse_ref).abs().max() < 10 * tol, (dtype, n, vocab)
        assert (got.float() - grad_ref.float()).abs().max() <= tol, (dtype, n, vocab)
        untouched = logits.clone()
        lm_loss_kernel.softmax_minus_onehot_(untouched, targets, False)
        assert torch.equal(untouched, logits)
print("ok")
"""


def test_kernel_equals_torch_ops_in_triton_interpreter():
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
