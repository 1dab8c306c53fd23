"""Pretraining throughput: encoderlab vs the Hugging Face implementation of the same model, in one process.

For each preset and objective, both models get the same shapes, weights, dtype (bf16 autocast), batch, threads and
optimizer (AdamW), and their training steps alternate so that machine noise hits both alike. The baseline is the
obvious alternative: `EuroBertForMaskedLM` (MLM) or `LlamaForCausalLM` (CLM) called with `labels`, in a plain
PyTorch loop. encoderlab additionally applies document masks (packed windows of several documents); the baseline
attends across the whole window, which is less work. MFU is model FLOPs per second over the bf16 matrix-product peak
measured here, in this run.

    python benchmarks/pretrain_throughput.py --presets tiny mini --objectives mlm40 clm
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from encoderlab import objectives
from encoderlab.model.hf import hf_config
from encoderlab.model.presets import preset
from encoderlab.model.transformer import TransformerLM


def bf16_peak_flops(n: int = 2048, reps: int = 20) -> float:
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t)


def packed_batch(batch: int, seq_len: int, vocab: int, mean_doc: int, seed: int = 0):
    """Random tokens in windows of several documents, each `<bos> ... <eos>` (ids 0 and 1)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (batch, seq_len), generator=g)
    starts = torch.rand(batch, seq_len, generator=g) < 1 / mean_doc
    starts[:, 0] = True
    docs = starts.long().cumsum(1) - 1
    ids[starts] = 0
    ends = torch.zeros_like(starts)
    ends[:, :-1] = starts[:, 1:]
    ids[ends] = 1
    return ids, docs


def timed(fn, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench(name: str, objective_name: str, batch: int, seq_len: int, reps: int, warmup: int, peak: float) -> dict:
    objective = objectives.parse_objective(objective_name)
    cfg = preset(name, bos_token_id=0, eos_token_id=1, pad_token_id=2, mask_token_id=3)
    torch.manual_seed(0)
    ours = TransformerLM(cfg)
    ours.init_weights(0)
    kind = "llama" if objective.causal else "eurobert"
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if objective.causal else AutoModelForMaskedLM
    hf = auto.from_config(hf_config(cfg, kind), attn_implementation="sdpa")
    hf.load_state_dict(ours.state_dict(), strict=True)
    ids, docs = packed_batch(batch, seq_len, cfg.vocab_size, mean_doc=128)
    gen = torch.Generator().manual_seed(0)
    special = [0, 1, 2, 3]
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4, fused=True)
    opt_hf = torch.optim.AdamW(hf.parameters(), lr=1e-4)

    def step_ours():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = objectives.objective_loss(ours, ids, docs, objective, special_ids=special, mask_id=3,
                                                vocab_size=cfg.vocab_size, generator=gen)
        loss.backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)

    def step_hf():
        inputs = objectives.prepare(objective, ids, docs, special_ids=special, mask_id=3, vocab_size=cfg.vocab_size,
                                    generator=gen)
        labels = ids if objective.causal else inputs.labels  # HF shifts CLM labels itself
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = hf(input_ids=inputs.input_ids, labels=labels).loss
        loss.backward()
        opt_hf.step()
        opt_hf.zero_grad(set_to_none=True)

    times: dict[str, list[float]] = {"encoderlab": [], "transformers": []}
    for _ in range(warmup):
        step_ours(), step_hf()
    for _ in range(reps):  # alternate, so drift in machine speed affects both
        times["encoderlab"] += timed(step_ours, 1, 0)
        times["transformers"] += timed(step_hf, 1, 0)
    tokens = batch * seq_len
    head_fraction = getattr(objective, "mask_rate", 1.0)
    flops_per_token = cfg.flops_per_token(seq_len, objective.causal, training=True, head_fraction=head_fraction)
    result = {"preset": name, "objective": objective.name, "batch": batch, "seq_len": seq_len,
              "threads": torch.get_num_threads(), "parameters": cfg.num_parameters()}
    for who, ts in times.items():
        tps = tokens / statistics.median(ts)
        result[who] = {"tokens_per_s": round(tps), "mfu": round(tps * flops_per_token / peak, 4)}
    result["ratio"] = round(result["encoderlab"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--objectives", nargs="+", default=["mlm40", "clm"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    peak = bf16_peak_flops()
    results = [bench(p, o, args.batch, args.seq_len, args.reps, args.warmup, peak)
               for p in args.presets for o in args.objectives]
    if args.json:
        print(json.dumps({"bf16_peak_tflops": round(peak / 1e12, 3), "results": results}, indent=2))
        return
    print(f"bf16 matmul peak measured: {peak / 1e12:.2f} TFLOP/s, {torch.get_num_threads()} threads, "
          f"batch {args.batch} x {args.seq_len} tokens, median of {args.reps} alternating steps")
    print(f"{'preset':<6} {'objective':<9} {'encoderlab tok/s':>17} {'MFU':>6} {'transformers tok/s':>19} {'MFU':>6} "
          f"{'ratio':>6}")
    for r in results:
        e, h = r["encoderlab"], r["transformers"]
        print(f"{r['preset']:<6} {r['objective']:<9} {e['tokens_per_s']:>17,} {e['mfu']:>6.1%} "
              f"{h['tokens_per_s']:>19,} {h['mfu']:>6.1%} {r['ratio']:>6.2f}x")


if __name__ == "__main__":
    main()
