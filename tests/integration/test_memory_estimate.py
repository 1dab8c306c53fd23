"""The fine-tuning memory estimate (finetuning/memory.py) against the peak resident memory of real fine-tuning
steps: a fresh process (as a sweep's command or worker is, glibc keeping freed memory) builds the run the sweep
builds (its copy of the checkpoint's weights, the backbone, a head, fused AdamW) on random weights, trains a few
steps and reads its own high-water mark (VmHWM, /proc/self/status), which counts everything torch allocates."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
from encoderlab.core.process import keep_freed_memory
keep_freed_memory()
import torch
from encoderlab.finetuning.memory import estimate
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import FinetuneRun
from encoderlab.model import attention
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.classification import ClassificationTask

layers, hidden, ffn, heads, kv, vocab, batch, length, steps = map(int, sys.argv[1:10])
torch.set_num_threads(1)
cfg = ModelConfig(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                  num_key_value_heads=kv, vocab_size=vocab)
task = object.__new__(ClassificationTask)  # only what a training step reads: the head and the loss
task.name, task.family, task.labels, task.classification_head = "probe", "classification", ["a", "b"], "linear"
protocol = Protocol(name="p", max_steps=steps, batch_size=batch, eval_batch_size=batch, lrs=[1e-4], seeds=[0],
                    max_length=length, dtype=sys.argv[10])
cpu = torch.device("cpu")
predicted = estimate(cfg, task, protocol, cpu).total  # before any run, as a sweep says it
weights = Transformer(cfg, attention.for_finetuning(cpu, length)).state_dict()  # the sweep's copy
run = FinetuneRun(task, cfg, weights, 0, protocol, cpu)
g = torch.Generator().manual_seed(0)
for _ in range(steps):
    run.step({"input_ids": torch.randint(0, vocab, (batch, length), generator=g),
              "attention_mask": torch.ones(batch, length, dtype=torch.long),
              "labels": torch.randint(0, 2, (batch,), generator=g)}, 1e-4)
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak": peak, "estimate": predicted}))
"""


def peak_and_estimate(*shape, dtype: str) -> tuple[int, int]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):  # as a sweep's own process
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", PROBE, *map(str, shape), dtype], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    return got["peak"], got["estimate"]


needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")


@needs_proc
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(2, 32, 64, 2, 1, 320, 8, 32, 3), (4, 256, 1024, 4, 2, 8192, 16, 64, 3)],
                         ids=["2-layer-32-wide", "tiny-preset"])
def test_the_estimate_is_within_15_percent_of_a_small_runs_peak(shape, dtype):
    peak, est = peak_and_estimate(*shape, dtype=dtype)
    assert abs(est - peak) <= 0.15 * peak, f"estimate {est / 2**20:.0f} MB, measured peak {peak / 2**20:.0f} MB"


@needs_proc
@pytest.mark.slow
def test_the_estimate_is_within_15_percent_of_a_135m_runs_peak():
    """SmolLM2-135M's shape (30 layers, 576 wide, 1536 FFN, 9 heads, 3 KV heads, 49,152 tokens), 4 sequences of 64
    tokens, fp32: about 3.5 GB, 15-20 s on one core (slow: the default suite keeps the two small shapes)."""
    peak, est = peak_and_estimate(30, 576, 1536, 9, 3, 49_152, 4, 64, 2, dtype="fp32")
    assert abs(est - peak) <= 0.15 * peak, f"estimate {est / 2**20:.0f} MB, measured peak {peak / 2**20:.0f} MB"
