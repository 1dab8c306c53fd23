"""Pretraining throughput: encoderlab vs the Hugging Face implementation of the same model, in one process.

For each preset and objective, both models get the same shapes, weights, dtype (bf16 autocast), batch, threads and
optimizer (fused AdamW, the default of transformers' Trainer), and their training steps alternate so that machine
noise hits both alike. The baseline is the obvious alternative: `EuroBertForMaskedLM` (MLM) or `LlamaForCausalLM`
(CLM, without a KV cache) called with `labels`, in a plain PyTorch loop. encoderlab additionally applies document
masks (packed windows of several documents); the baseline attends across the whole window, which is less work. MFU
is model FLOPs per second over the matrix-product peak of the run's dtype measured here, in this run, on the same
device. Both implementations count the same model FLOPs (for MLM the head at its masked positions only), as MFU is
defined: work an implementation does beyond them (the baseline's MLM head at every position) lowers its MFU.
`--dtype auto` (the default) is bf16 autocast where the device multiplies bf16 natively and fp32 elsewhere, as the
configs' `dtype: auto`.

Peak memory is measured apart from the timing, one implementation at a time: on CUDA the peak of
`torch.cuda.max_memory_allocated` over two training steps, on CPU the growth of the peak resident set size
(VmHWM, reset before the model is built; `getrusage` maxrss where /proc is missing) of a fresh process over two
steps; both count from before the model is built (weights, AdamW state, gradients, activations).

    python benchmarks/pretrain_throughput.py --presets tiny mini 210m:128 --objectives mlm40 clm
    python benchmarks/pretrain_throughput.py --quick --no-memory     # smoke test: the default test suite runs it
    python benchmarks/pretrain_throughput.py --presets micro --profile 3 --no-memory  # where each step's time goes
    (PRESET:SEQ_LEN gives one preset its own sequence length; --seq-len is the others')
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from encoderlab.core.process import keep_freed_memory
from encoderlab.hub.hf import hf_config
from encoderlab.model import attention
from encoderlab.model.attention import for_pretraining
from encoderlab.model.presets import preset
from encoderlab.model.transformer import TransformerLM
from encoderlab.pretraining import objectives
from encoderlab.pretraining.distributed import World, compile_kernel, prepare_model
from encoderlab.runs.optim import resolve_dtype

IMPLEMENTATIONS = ("encoderlab", "transformers")
SPECIAL = [0, 1, 2, 3]  # bos, eos, pad, mask of the synthetic batches


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_flops(device: torch.device, reps: int = 20, dtype: str = "bf16", n: int | None = None) -> float:
    """FLOP/s of a large (n x n) matrix product in `dtype` ("bf16" or "fp32") on `device`."""
    n = n or (8192 if device.type == "cuda" else 2048)
    a, b = (torch.randn(n, n, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32, device=device)
            for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    synchronize(device)
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


@dataclass(frozen=True)
class Shape:
    preset: str
    objective: str
    batch: int
    seq_len: int
    compile: bool = False  # the trainer's train.compile (each block); the baseline's decoder layers alike
    dtype: str = "bf16"  # bf16 autocast or fp32, both implementations
    mean_doc: int = 128  # mean document length of the packed windows (geometric): how much attention masks away
    eager_up_to: int | None = None  # encoderlab's CPU attention form by length (None: model/attention.py's own)


def parse_preset(text: str, default_seq_len: int) -> tuple[str, int]:
    """'210m:128' -> ('210m', 128); 'tiny' -> ('tiny', default_seq_len)."""
    name, _, seq_len = text.partition(":")
    if seq_len and not seq_len.isdigit():
        raise SystemExit(f"--presets {text!r}: write PRESET or PRESET:SEQ_LEN, e.g. 210m:128")
    return name, int(seq_len) if seq_len else default_seq_len


def configs(shape: Shape):
    """(objective, encoderlab's model config, the baseline's transformers config) of `shape`."""
    objective = objectives.parse_objective(shape.objective)
    cfg = preset(shape.preset, bos_token_id=0, eos_token_id=1, pad_token_id=2, mask_token_id=3)
    return objective, cfg, hf_config(cfg, "llama" if objective.causal else "eurobert")


def build(impl: str, shape: Shape, device: torch.device, weights: dict | None = None):
    """A model of `impl` on `device` and a function that makes one training step with it."""
    objective, cfg, hf_cfg = configs(shape)
    if impl == "encoderlab":
        torch.manual_seed(0)
        if shape.eager_up_to is not None:  # form_for reads it for every layout this process builds from here on
            attention.EAGER_MAX_LEN = shape.eager_up_to
        # The trainer's default document attention (train.attention: auto): varlen on CPU, flex on CUDA.
        backend = for_pretraining("auto", device, shape.seq_len, compile_kernel)
        model = TransformerLM(cfg, backend)
        model.init_weights(0)
        if shape.compile:
            switches = SimpleNamespace(activation_checkpointing=False, compile=True, parallel="none", dtype=shape.dtype)
            prepare_model(model, switches, World(), device)
    else:
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

        auto = AutoModelForCausalLM if objective.causal else AutoModelForMaskedLM
        model = auto.from_config(hf_cfg, attn_implementation="sdpa")
        if weights is not None:
            model.load_state_dict(weights, strict=True)
        if objective.causal:
            # Training keeps no KV cache (encoderlab keeps none). With Llama's default one, each compiled layer
            # guards on its own cache entry: one recompile per layer, and past torch's recompile limit (8) the 210m's
            # last 4 of 12 layers ran eager, a slower baseline than a user of transformers would train with.
            model.config.use_cache = False
        if shape.compile:
            for layer in model.model.layers:
                layer.compile()
    model.to(device)
    ids, docs = (t.to(device) for t in packed_batch(shape.batch, shape.seq_len, cfg.vocab_size, shape.mean_doc))
    gen = torch.Generator(device).manual_seed(0)
    vocab = objectives.Vocab(cfg.vocab_size, 3, tuple(SPECIAL))
    # Fused on both sides: transformers' Trainer defaults to `adamw_torch_fused` since torch 2.8 (a foreach AdamW for
    # the baseline took 9.8 of its 122 ms step on an H100, ours 3.4).
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    bf16 = shape.dtype == "bf16"

    def step_encoderlab():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            sums = objectives.loss_sums(model, ids, docs, objective, vocab, gen)
        (sums.loss / sums.tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def step_transformers():
        if objective.causal:  # HF shifts CLM labels itself; no prepare, whose label positions cost a host sync
            input_ids = labels = ids
        else:
            inputs = objective.prepare(ids, docs, vocab, gen)
            input_ids, labels = inputs.input_ids, inputs.labels
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, cfg, objective, step_encoderlab if impl == "encoderlab" else step_transformers


def timed(step, device: torch.device) -> float:
    synchronize(device)
    t = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - t


def bench(shape: Shape, reps: int, warmup: int, peak: float, device: torch.device) -> dict:
    ours, cfg, objective, step_ours = build("encoderlab", shape, device)
    _, _, _, step_hf = build("transformers", shape, device, weights=ours.state_dict())
    steps = {"encoderlab": step_ours, "transformers": step_hf}
    times: dict[str, list[float]] = {impl: [] for impl in IMPLEMENTATIONS}
    for _ in range(warmup):
        step_ours(), step_hf()
    for rep in range(reps):  # alternate, each going first in turn, so drift in machine speed affects both alike
        for impl in IMPLEMENTATIONS if rep % 2 == 0 else IMPLEMENTATIONS[::-1]:
            times[impl].append(timed(steps[impl], device))
    tokens = shape.batch * shape.seq_len
    head_fraction = getattr(objective, "mask_rate", 1.0)
    flops_per_token = cfg.flops_per_token(shape.seq_len, objective.causal, training=True, head_fraction=head_fraction)
    result = {"preset": shape.preset, "objective": objective.name, "batch": shape.batch, "seq_len": shape.seq_len,
              "compile": shape.compile, "dtype": shape.dtype, "mean_doc": shape.mean_doc,
              "device": str(device), "threads": torch.get_num_threads(), "parameters": cfg.num_parameters()}
    for impl, ts in times.items():
        tps = tokens / statistics.median(ts)
        result[impl] = {"tokens_per_s": round(tps), "mfu": round(tps * flops_per_token / peak, 4)}
    result["ratio"] = round(result["encoderlab"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 3)
    return result


def profile(shape: Shape, steps: int, rows: int, device: torch.device) -> str:
    """Where a training step's time goes: torch.profiler over `steps` steps of each implementation (after two
    warm-ups), the `rows` operators with the most self time on the device (the CPU's time on a CPU), and per step
    the wall time, the time kernels kept the device busy and how many kernels ran."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    ours, *_, step_ours = build("encoderlab", shape, device)
    steps_of = {"encoderlab": step_ours, "transformers": build("transformers", shape, device,
                                                               weights=ours.state_dict())[3]}
    parts = []
    for impl, step in steps_of.items():
        for _ in range(2):
            step()
        synchronize(device)
        with profiler(activities=activities) as prof:
            started = time.perf_counter()
            for _ in range(steps):
                step()
            synchronize(device)
            wall = (time.perf_counter() - started) / steps
        events = prof.key_averages()
        line = f"{impl} {shape.preset} {shape.objective} compile={shape.compile}: {wall * 1e3:.1f} ms per step"
        if cuda:
            kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
            busy = sum(e.device_time for e in kernels) / 1e3 / steps
            line += f", device busy {busy:.1f} ms, {len(kernels) / steps:.0f} kernels per step"
        parts.append(line + "\n" + events.table(sort_by=sort, row_limit=rows, max_name_column_width=60))
    return "\n".join(parts)


def _import_model_code(shape: Shape) -> None:
    """The baseline's modelling code, imported before the peak is reset: its code is no part of either
    implementation's memory. transformers imports it lazily, at the first model built (about 80 MiB of modules, where
    `import transformers` loads almost nothing); encoderlab's is imported with this script."""
    from transformers.models.auto import modeling_auto

    objective, _, hf_cfg = configs(shape)
    mapping = (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING if objective.causal
               else modeling_auto.MODEL_FOR_MASKED_LM_MAPPING)
    mapping[type(hf_cfg)]  # the lookup imports the model's module


def _peak_memory_here(impl: str, shape: Shape, device_name: str, threads: int, keep_freed: bool = False) -> int:
    """Bytes: peak memory of two training steps of `impl`, counted from before its model is built."""
    _import_model_code(shape)
    if keep_freed:  # the allocator setting of the timed steps (a spawned process starts from glibc's defaults)
        keep_freed_memory()
    device = torch.device(device_name)
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _reset_peak_rss()
    model, _, _, step = build(impl, shape, device)
    for _ in range(2):  # the second step holds AdamW's state as well as activations and gradients
        step()
    if device.type == "cuda":
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del model, step
        torch.cuda.empty_cache()
        return peak
    return _peak_rss() - before


def _reset_peak_rss() -> int:
    """Bytes resident now. On Linux the peak (VmHWM) is reset to it first: the imports' own peak, often higher
    than a small model's, would otherwise hide the model's. Elsewhere the peak since the process started stays."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _proc_status_bytes("VmRSS")
    except OSError:
        return _maxrss()


def _peak_rss() -> int:
    try:
        return _proc_status_bytes("VmHWM")
    except OSError:
        return _maxrss()


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise OSError(f"no {field} in /proc/self/status")


def peak_memory(impl: str, shape: Shape, device: torch.device, keep_freed: bool = False) -> int:
    if device.type == "cuda":
        return _peak_memory_here(impl, shape, str(device), torch.get_num_threads())
    # The peak resident set size only grows: a fresh process per measurement starts from the import baseline.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_peak_memory_here, (impl, shape, str(device), torch.get_num_threads(), keep_freed))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"], help="PRESET or PRESET:SEQ_LEN")
    parser.add_argument("--objectives", nargs="+", default=["mlm40", "clm"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512, help="for presets given without :SEQ_LEN")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    parser.add_argument("--mean-doc", type=int, default=128, metavar="TOKENS",
                        help="mean document length in the packed windows (geometric; the offline corpus: ~180 at 512 "
                             "tokens); a value above the window length gives one document a window")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block of both models")
    parser.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto",
                        help="bf16 autocast or fp32; auto: bf16 where the device multiplies bf16 natively")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--malloc", choices=["keep", "default"], default="keep",
                        help="keep: glibc keeps freed memory, as the encoderlab command sets it for itself and its "
                             "workers (both implementations gain); default: glibc's own setting")
    parser.add_argument("--eager-up-to", type=int, default=None, metavar="TOKENS",
                        help="encoderlab's CPU attention in the eager form up to TOKENS (a varlen bucket by its "
                             "length), the flash kernel beyond; default: the library's choice (EAGER_MAX_LEN in "
                             "model/attention.py). Measures a form before it is chosen: it changes the numerics")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="also profile STEPS steps of each implementation per shape: the top operators by time")
    parser.add_argument("--profile-rows", type=int, default=25)
    parser.add_argument("--quick", action="store_true",
                        help="smoke test (numbers are noise): micro at 64 tokens, batch 2, one step each")
    args = parser.parse_args(argv)
    if args.mean_doc < 1:
        parser.error(f"--mean-doc {args.mean_doc}: a document has at least 1 token")
    if args.eager_up_to is not None and args.eager_up_to < 0:
        parser.error(f"--eager-up-to {args.eager_up_to}: a length in tokens, 0 or more (0: the flash kernel only)")
    malloc = ("keep" if keep_freed_memory() else "not set (not glibc, or set by the environment)"
              ) if args.malloc == "keep" else "default"
    if args.quick:
        args.presets, args.batch, args.reps, args.warmup = ["micro:64"], 2, 1, 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    dtype = resolve_dtype(args.dtype, device.type)
    peak = peak_flops(device, reps=2 if args.quick else 20, dtype=dtype, n=256 if args.quick else None)
    shapes = [Shape(name, o, args.batch, seq_len, args.compile, dtype, args.mean_doc, args.eager_up_to)
              for name, seq_len in (parse_preset(p, args.seq_len) for p in args.presets) for o in args.objectives]
    results = []
    for shape in shapes:
        result = bench(shape, args.reps, args.warmup, peak, device)
        if not args.no_memory:
            for impl in IMPLEMENTATIONS:
                result[impl]["peak_memory_mib"] = round(peak_memory(impl, shape, device, malloc == "keep") / 2**20)
        results.append(result)
        if args.profile:
            print(profile(shape, args.profile, args.profile_rows, device), flush=True)
    eager = attention.EAGER_MAX_LEN if args.eager_up_to is None else args.eager_up_to
    if args.json:
        print(json.dumps({"dtype": dtype, "peak_tflops": float(f"{peak / 1e12:.4g}"), "device": str(device),
                          "malloc": malloc, "eager_up_to": eager, "results": results}, indent=2))
        return
    print(f"{dtype} matmul peak measured: {peak / 1e12:.3g} TFLOP/s on {device}, {torch.get_num_threads()} threads, "
          f"batch {args.batch}, documents of ~{args.mean_doc} tokens, median of {args.reps} alternating steps; "
          f"allocator: {malloc}; encoderlab's CPU attention eager up to {eager} tokens, flash beyond")
    print(f"{'preset':<6} {'seq':>5} {'objective':<9} {'encoderlab tok/s':>17} {'MFU':>6} {'peak MiB':>9} "
          f"{'transformers tok/s':>19} {'MFU':>6} {'peak MiB':>9} {'ratio':>6}")
    for r in results:
        e, h = r["encoderlab"], r["transformers"]
        mem = {k: f"{v['peak_memory_mib']:,}" if "peak_memory_mib" in v else "-" for k, v in (("e", e), ("h", h))}
        print(f"{r['preset']:<6} {r['seq_len']:>5} {r['objective']:<9} {e['tokens_per_s']:>17,} {e['mfu']:>6.1%} "
              f"{mem['e']:>9} {h['tokens_per_s']:>19,} {h['mfu']:>6.1%} {mem['h']:>9} {r['ratio']:>6.2f}x")


if __name__ == "__main__":
    main()
