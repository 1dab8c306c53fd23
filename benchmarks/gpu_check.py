"""`make gpu-check`: check and measure every CUDA code path of encoderlab in one command (issue 20).

Correctness (each check prints its error and the limit it must stay under; a failure fails the run):
  attention    packed-document attention through flex_attention's BlockMask and through the dense mask, forward and
               backward, fp32 and bf16, causal and bidirectional, each against a float64 dense reference
  lm-loss      the fused LM head + loss (model/lm_loss.py) against the plain logits + cross-entropy, loss and grads
  pretraining  a 50-step `tiny` CLM pretraining on the device against the same run on the CPU, per-step losses
  continued    50 steps of continued MLM of tiny transformers BERT and ModernBERT folders (their own classes), the
               device against the CPU, per-step losses
  finetuning   one LR x seed grid per task family, sequential engine against batched engine: the same records
  fsdp2        `torchrun --nproc-per-node <GPUs> -m encoderlab.cli pretrain --set train.parallel=fsdp2` against
               the same run in one plain process
Speed (reported next to the issue's targets, never failing the run):
  attention-speed  flex (BlockMask) against dense-mask SDPA, fwd+bwd, packed 2,048-token windows of FineWeb-like
                   document lengths
  pretrain-speed   the 210M and 610M shapes at 2,048 tokens, bf16, MLM 40% and CLM, compiled: tokens/s, MFU
                   against the bf16 matmul peak measured in this run, peak memory, next to transformers'
                   EuroBertForMaskedLM / LlamaForCausalLM compiled alike, alternating in one process
                   (benchmarks/pretrain_throughput.py; without --compile it measures eager)
  finetuning       runs per hour of both engines (same section as the records)

Writes gpu-check.json and gpu-check.md into --out. `--smoke --device cpu` runs the same logic at small shapes in
seconds (the default test suite does: tests/unit/test_gpu_check.py); what needs CUDA is skipped with the reason.

    python benchmarks/gpu_check.py --out gpu-check                       # on a CUDA machine
    python benchmarks/gpu_check.py --prepare-wheels .whl                 # here, with PyPI: wheels for the machine
    python benchmarks/gpu_check.py --install-wheels .whl --out $OUT      # there: install what is missing, then check
    python benchmarks/gpu_check.py --docs-from gpu-check/gpu-check.json  # its GPU section into docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import gpu_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cuda or cpu")
    p.add_argument("--smoke", action="store_true", help="small shapes, few steps: the logic in seconds")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--only", nargs="+", default=None, help="run only these sections")
    p.add_argument("--out", type=Path, default=ROOT / "gpu-check", help="folder of gpu-check.json and .md")
    p.add_argument("--prepare-wheels", type=Path, metavar="DIR", help="download the wheels for the GPU machine")
    p.add_argument("--install-wheels", type=Path, metavar="DIR", help="install what is missing from DIR first")
    p.add_argument("--docs-from", type=Path, metavar="JSON", help="write the GPU section of docs/benchmarks.md")
    p.add_argument("--docs", type=Path, default=DOCS, help="the file --docs-from writes into")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.prepare_wheels:
        gpu_env.prepare(args.prepare_wheels)
        return 0
    if args.install_wheels:  # then the check runs in a fresh interpreter that sees the installed packages
        site = gpu_env.install(args.install_wheels, Path("/tmp/encoderlab-gpu-overlay"))
        rest = [a for i, a in enumerate(argv) if a != "--install-wheels" and argv[i - 1:i] != ["--install-wheels"]]
        env = {**os.environ, "PYTHONPATH": gpu_env.python_path(*filter(None, [site]), ROOT / "src")}
        os.execve(sys.executable, [sys.executable, __file__, *rest], env)
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    import gpu_report

    if args.docs_from:
        gpu_report.write_docs(json.loads(args.docs_from.read_text()), args.docs)
        print(f"the GPU section of {args.docs} now holds {args.docs_from}")
        return 0
    import gpu_sections
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    report = gpu_sections.run_all(args.device, args.smoke, args.only)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    markdown = gpu_report.markdown(report)
    (args.out / "gpu-check.md").write_text(markdown)
    print(markdown)
    failed = [name for name, s in report["sections"].items() if s["status"] == "failed"]
    print(f"written: {args.out / 'gpu-check.json'}, {args.out / 'gpu-check.md'}; "
          + (f"FAILED: {', '.join(failed)}" if failed else "no check failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
