"""The sections of `benchmarks/gpu_check.py`: each returns its numbers and checks; what the device cannot run is
skipped with the reason. They call encoderlab's own paths (model/attention.py backends, the trainer, the fine-tuning
engines, the CLI under torchrun) and benchmarks/pretrain_throughput.py; nothing here re-implements them."""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/: the synthetic corpus and tasks the test suite trains on

# Stated tolerances. Attention and loss: max |error| over max |reference| against a float64 reference; a wrong mask
# or a wrong gradient moves them by 0.1-1. fp32 leaves room for tf32 (~5e-4); bf16 rounds at 2^-8 = 4e-3 per value.
ATTENTION_TOL = {"fp32": 1e-3, "bf16": 3e-2}
LOSS_TOL = {"fp32": 1e-4, "bf16": 2e-2}
# Pretraining, device against CPU, the largest per-step relative loss difference over the run: float rounding in
# another order (and flex against the CPU's varlen attention) grows through Adam to ~1e-5 (fp32); bf16 products.
CURVE_TOL = {"fp32": 1e-3, "bf16": 3e-2}
# Fine-tuning engines: fp32 as tests/unit/test_batched.py (measured 1e-6); bf16 as docs/benchmarks.md (1e-4..1e-2).
ENGINE_TOL = {"fp32": 1e-4, "bf16": 5e-2}
FSDP_TOL = 1e-4  # fp32, gradients summed in another order over ranks (tests/distributed: ~1e-7)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Skip(Exception):
    """A part the device cannot run; the message says why."""


class Section:
    def __init__(self, ctx) -> None:
        self.ctx, self.checks, self.numbers, self.skipped = ctx, [], {}, []

    def check(self, name: str, value: float, limit: float) -> None:
        ok = bool(value <= limit)  # NaN fails
        self.checks.append({"check": name, "value": float(value), "limit": limit, "ok": ok})
        self.ctx.log(f"  {'ok  ' if ok else 'FAIL'} {name}: {value:.3g} (limit {limit:g})")

    def skip(self, what: str, reason: str) -> None:
        self.skipped.append({"what": what, "reason": reason})
        self.ctx.log(f"  skipped {what}: {reason}")


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def fineweb_like_doc_ids(batch: int, seq_len: int, seed: int, median: float = 400, sigma: float = 1.1):
    """Document ids of packed windows whose document lengths are log-normal (at the default median of 400 tokens
    and sigma 1.1: mean ~730, a tenth over 1,600): most documents a few hundred tokens and a long tail, as in web
    text like FineWeb. Smoke shapes take a shorter median, so that their windows hold several documents too."""
    g = random.Random(seed)
    rows = []
    for _ in range(batch):
        ids, doc = [], 0
        while len(ids) < seq_len:
            ids += [doc] * max(1, round(g.lognormvariate(math.log(median), sigma)))
            doc += 1
        rows.append(ids[:seq_len])
    return torch.tensor(rows)


def flex_backend(device: torch.device, seq_len: int):
    """The trainer's flex backend (compiled on CUDA); on CPU flex_attention's eager reference."""
    from encoderlab.model.attention import Flex, for_pretraining

    if device.type == "cuda":
        from encoderlab.pretraining.distributed import compile_kernel

        return for_pretraining("flex", device, seq_len, compile_kernel)
    return Flex()


def attention_inputs(shape: dict, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T, H, Hkv, D = (shape[k] for k in ("batch", "seq_len", "heads", "kv_heads", "head_dim"))
    q = torch.randn(B, T, H, D, generator=g)
    k, v = (torch.randn(B, T, Hkv, D, generator=g) for _ in range(2))
    return q, k, v, torch.randn(B, T, H, D, generator=g)


def attend_with(backend, causal, docs, q, k, v, cot, device, dtype, grad: bool):
    """Output (and q, k, v gradients) of one backend's layout, in float64 on the CPU for comparison."""
    qq, kk, vv = (x.to(device, dtype, copy=True).requires_grad_(grad) for x in (q, k, v))
    out = backend.layout(causal, docs.to(device), None)(qq, kk, vv)
    grads = torch.autograd.grad(out, (qq, kk, vv), cot.to(device, out.dtype)) if grad else ()
    return [t.detach().double().cpu() for t in (out, *grads)]


def attention(ctx) -> Section:
    from encoderlab.model.attention import Dense, for_finetuning

    s, shape = Section(ctx), ctx.sizes["attention"]
    docs = fineweb_like_doc_ids(shape["batch"], shape["seq_len"], seed=0, median=shape["median_doc"])
    flex, dense = flex_backend(ctx.device, shape["seq_len"]), for_finetuning(ctx.device, shape["seq_len"])
    flex_grad = ctx.device.type == "cuda"
    if not flex_grad:
        s.skip("flex backward", f"flex_attention has no backward on {ctx.device.type} (forward checked)")
    for dtype_name in ("fp32", "bf16"):
        for causal in (True, False):
            q, k, v, cot = attention_inputs(shape, DTYPES[dtype_name], seed=1)
            ref = attend_with(Dense("repeat-kv"), causal, docs, q, k, v, cot, ctx.device, torch.float64, True)
            got_flex = attend_with(flex, causal, docs, q, k, v, cot, ctx.device, DTYPES[dtype_name], flex_grad)
            got_dense = attend_with(dense, causal, docs, q, k, v, cot, ctx.device, DTYPES[dtype_name], True)
            tag = f"{dtype_name} {'causal' if causal else 'bidirectional'}"
            s.numbers[f"{tag}: max abs error flex - dense (output)"] = (got_flex[0] - got_dense[0]).abs().max().item()
            for name, got in (("flex", got_flex), ("dense", got_dense)):
                for part, a, b in zip(("output", "grad q", "grad k", "grad v"), got, ref):
                    s.check(f"{name} {tag} {part} vs float64", rel_error(a, b), ATTENTION_TOL[dtype_name])
    return s


def lm_loss(ctx) -> Section:
    import torch.nn.functional as F

    from encoderlab.model.lm_loss import fused_linear_cross_entropy

    s, (n, c, vocab) = Section(ctx), ctx.sizes["lm_loss"]
    g = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(n, c, generator=g), torch.randn(vocab, c, generator=g) * c**-0.5
    targets = torch.randint(0, vocab, (n,), generator=g).to(ctx.device)

    def run(fused: bool, dtype: str):
        h, w = (x.to(ctx.device, copy=True).requires_grad_() for x in (h0, w0))
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            if fused:
                loss = fused_linear_cross_entropy(h, w, targets)[0]
            else:
                loss = F.cross_entropy((h @ w.T).float(), targets, reduction="sum")
        loss.backward()
        return loss.detach(), h.grad, w.grad

    for dtype in ("fp32", "bf16"):
        fused, plain = run(True, dtype), run(False, dtype)
        for part, a, b in zip(("loss", "grad h", "grad W"), fused, plain):
            s.check(f"fused vs plain {dtype} {part}", rel_error(a, b), LOSS_TOL[dtype])
    _loss_kernel(s, ctx, n, vocab)
    return s


def _loss_kernel(s: Section, ctx, n: int, vocab: int) -> None:
    """The Triton pass over the logits (model/lm_loss_kernel.py) against float64, and its time against the torch ops."""
    from encoderlab.model import lm_loss, lm_loss_kernel

    if ctx.device.type != "cuda" or not lm_loss_kernel.available():
        s.skip("lm-loss kernel", "needs CUDA and Triton")
        return
    g = torch.Generator(ctx.device).manual_seed(1)
    for dtype in ("fp32", "bf16"):
        logits = (torch.randn(n, vocab, device=ctx.device, generator=g) * 4).to(DTYPES[dtype])
        targets = torch.randint(0, vocab, (n,), device=ctx.device, generator=g)
        ref = logits.double()
        ref_lse = torch.logsumexp(ref, -1)
        ref_grad = torch.softmax(ref, -1)
        ref_grad[torch.arange(n, device=ctx.device), targets] -= 1
        got = logits.clone()
        lse, top, target_logit = lm_loss_kernel.softmax_minus_onehot_(got, targets, True)
        s.check(f"kernel {dtype} lse vs float64", rel_error(lse, ref_lse), LOSS_TOL[dtype])
        s.check(f"kernel {dtype} softmax - onehot vs float64", rel_error(got, ref_grad), LOSS_TOL[dtype])
        s.check(f"kernel {dtype} largest and target logit exact",
                float((top != ref.amax(-1)).sum() + (target_logit != ref.gather(1, targets[:, None])[:, 0]).sum()), 0)
    rows = ctx.sizes["lm_loss_speed_rows"]
    logits = (torch.randn(rows, vocab, device=ctx.device, generator=g) * 4).bfloat16()
    targets = torch.randint(0, vocab, (rows,), device=ctx.device, generator=g)
    for name, fn in (("kernel", lambda x: lm_loss_kernel.softmax_minus_onehot_(x, targets, True)),
                     ("torch ops", lambda x: lm_loss.softmax_minus_onehot(x, targets, True))):
        times = []
        for _ in range(6):
            x = logits.clone()
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        s.numbers[f"pass over {rows} x {vocab} bf16 logits, {name} (ms)"] = round(statistics.median(times[1:]) * 1e3, 3)


# ---- pretraining on the device and on the CPU ----------------------------------------------------------------


def packed_data(work: Path, seq_len: int) -> Path:
    from tests.conftest import synthetic_documents

    from encoderlab.data.packing import pack
    from encoderlab.data.tokenizer import train_bpe

    out = work / f"packed-{seq_len}"
    if not (out / "meta.json").exists():
        docs = synthetic_documents(1500)
        pack(docs, train_bpe((d.text for d in docs), 512), out, seq_len=seq_len, val_fraction=0.05)
    return out


def pretrain_config(ctx, name: str, device: str, dtype: str, objective: str = "clm", **train):
    from encoderlab.core.config import validate
    from encoderlab.pretraining.config import PretrainConfig

    p = ctx.sizes["pretrain"]
    data = {"name": name, "out_dir": str(ctx.work / "runs"), "data": {"path": str(packed_data(ctx.work, p["seq_len"]))},
            "model": p["model"], "objective": objective, "optim": {"lr": 1e-3},
            "lr_schedule": {"kind": "wsd", "warmup_steps": 5, "decay_steps": 10},
            "train": {"steps": p["steps"], "global_batch": p["batch"], "dtype": dtype, "device": device,
                      "log_every": 1, "tensorboard": False, **train}}
    return validate(PretrainConfig, data, name)


def train_losses(ctx, cfg) -> list[float]:
    from encoderlab.pretraining.loop import Trainer

    Trainer(cfg, show_progress=False, log=lambda m: None).run()
    return metrics_losses(ctx.work / "runs" / cfg.name)


def metrics_losses(run_dir: Path) -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r[f"{r['phase']}/loss"] for r in rows]


def curve_difference(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not a:
        return math.inf
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def pretraining(ctx) -> Section:
    s = Section(ctx)
    dtypes = ("fp32", "bf16") if ctx.device.type == "cuda" else ("fp32",)
    for dtype in dtypes:
        here = train_losses(ctx, pretrain_config(ctx, f"tiny-{ctx.device.type}-{dtype}", str(ctx.device), dtype))
        if ctx.device.type == "cpu":
            cpu = here
            s.skip("the CPU comparison run", "the device is the CPU: its own run is the reference")
        else:
            cpu = train_losses(ctx, pretrain_config(ctx, f"tiny-cpu-{dtype}", "cpu", dtype))
        s.numbers[f"{dtype} losses ({ctx.device.type})"] = [round(x, 4) for x in here]
        s.numbers[f"{dtype} losses (cpu)"] = [round(x, 4) for x in cpu]
        s.check(f"{dtype} per-step loss, {ctx.device.type} vs cpu (relative)", curve_difference(here, cpu),
                CURVE_TOL[dtype])
        s.check(f"{dtype} loss falls over the run (last / first)", here[-1] / here[0], 0.99)
    ctx.checkpoint = ctx.work / "runs" / f"tiny-{ctx.device.type}-fp32"
    return s


def continued(ctx) -> Section:
    """Continued MLM of tiny transformers BERT and ModernBERT folders (pretraining/continued.py: transformers' own
    classes, a block mask or a row per document): one masked batch's loss and gradients on the device against the
    CPU (fp32; the masks drawn once on the CPU: the device's generator draws other ones), and a run on the device,
    fp32 against bf16 (the same masks), whose loss falls. Their dropout is off."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "faults")]
    from test_continued_pretraining import packed_with, write_masked_lm

    s = Section(ctx)
    dtypes = ("fp32", "bf16") if ctx.device.type == "cuda" else ("fp32",)
    for model_type in ("bert", "modernbert"):
        folder, packed = ctx.work / f"continued-{model_type}", ctx.work / f"continued-{model_type}-packed"
        if not (folder / "config.json").exists():
            packed_with(write_masked_lm(folder, model_type, dropout=False), packed)
        for part, error in _continued_parity(ctx, model_type, folder, packed).items():
            s.check(f"{model_type} one batch fp32 {part}, {ctx.device.type} vs cpu", error, LOSS_TOL["fp32"])
        curves = {dtype: train_losses(ctx, _continued_config(ctx, model_type, folder, packed, ctx.device.type, dtype))
                  for dtype in dtypes}
        for dtype, here in curves.items():
            s.numbers[f"{model_type} {dtype} losses ({ctx.device.type})"] = [round(x, 4) for x in here]
            falls = f"{model_type} {dtype} loss falls over the run (last / first)"
            if ctx.sizes["pretrain"]["steps"] >= 20:
                s.check(falls, here[-1] / here[0], 0.99)
            else:  # a smoke run's few steps: a number, not a check
                s.numbers[falls] = round(here[-1] / here[0], 4)
        if "bf16" in curves:
            s.check(f"{model_type} per-step loss, bf16 vs fp32 on {ctx.device.type} (relative)",
                    curve_difference(curves["bf16"], curves["fp32"]), CURVE_TOL["bf16"])
    return s


def _continued_parity(ctx, model_type: str, folder: Path, packed: Path) -> dict[str, float]:
    """Relative errors of the loss and of every gradient (the largest), the device against the CPU, on one batch."""
    import copy

    from encoderlab.pretraining.loop import Trainer

    cfg = _continued_config(ctx, model_type, folder, packed, "cpu", "fp32", name=f"continued-{model_type}-parity")
    trainer = Trainer(cfg, show_progress=False, log=lambda m: None)
    objective = cfg.phases[0].members[0]
    ids, docs = (torch.from_numpy(a) for a in trainer.train_data.windows([0, 1, 2, 3]))
    inputs = objective.prepare(ids, docs, trainer.vocab, torch.Generator().manual_seed(0))
    got = {}
    for device in ("cpu", ctx.device.type):
        model = copy.deepcopy(trainer.module).to(device).eval()
        loss, _ = model(inputs.input_ids.to(device), causal=False, doc_ids=docs.to(device),
                        output_positions=inputs.positions.to(device), targets=inputs.targets.to(device))
        loss.backward()
        got[device] = (loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (ref_loss, ref_grads), (loss, grads) = got["cpu"], got[ctx.device.type]
    # Over the largest gradient of the model, not each tensor's: BERT's attention key bias has a gradient of exactly 0
    # in exact arithmetic (softmax ignores a shift shared by all keys), so each device's is rounding noise of its own.
    scale = max(g.abs().max().item() for g in ref_grads.values())
    worst = max((grads[n].cpu() - g).abs().max().item() for n, g in ref_grads.items())
    return {"loss": rel_error(loss, ref_loss),
            "gradients (largest difference over the largest gradient)": worst / scale}


def _continued_config(ctx, model_type: str, folder: Path, packed: Path, device: str, dtype: str, name: str = ""):
    from encoderlab.core.config import validate
    from encoderlab.pretraining.config import PretrainConfig

    p, name = ctx.sizes["pretrain"], name or f"continued-{model_type}-{device}-{dtype}"
    return validate(PretrainConfig, {
        "name": name, "out_dir": str(ctx.work / "runs"), "data": {"path": str(packed)},
        "init": {"from_weights": str(folder)}, "objective": "mlm30", "optim": {"lr": 3e-3},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"steps": p["steps"], "global_batch": p["batch"], "dtype": dtype, "device": device, "log_every": 1,
                  "tensorboard": False}}, name)



# ---- fine-tuning: the sequential and the batched engine ------------------------------------------------------


def finetuning(ctx) -> Section:
    from tests.unit.test_batched import FAMILIES

    from encoderlab.finetuning import batched
    from encoderlab.finetuning.protocol import Protocol
    from encoderlab.finetuning.training import backbone_state, finetune
    from encoderlab.runs import checkpoint as ckpt

    s, f = Section(ctx), ctx.sizes["finetune"]
    if ctx.checkpoint is None:
        raise Skip("needs the pretraining section's checkpoint")
    model, cfg, tok = ckpt.load_model(ctx.checkpoint)
    weights = backbone_state(model.state_dict())
    protocol = Protocol(name="gpu-check", max_steps=f["steps"], batch_size=f["batch"], eval_batch_size=32,
                        lrs=f["lrs"], seeds=f["seeds"], max_length=f["max_length"], dtype=f["dtype"],
                        warmup_fraction=0.1, curve_every=max(1, f["steps"] // 5))
    runs = [(lr, seed) for lr in protocol.lrs for seed in protocol.seeds]
    for family, make in FAMILIES.items():
        task = make(random.Random(1), f["examples"])
        task.prepare(tok, f["max_length"])
        started = time.perf_counter()
        grid = {(b["lr"], b["seed"]): b for b in batched.finetune_grid(task, cfg, weights, runs, protocol=protocol,
                                                                      device=ctx.device)}
        batched_s = time.perf_counter() - started
        sequential, started = {}, time.perf_counter()
        for lr, seed in runs[:f["sequential_runs"]]:  # runs per hour is a rate: a share of the grid times it
            sequential[lr, seed] = finetune(task, cfg, weights, lr=lr, seed=seed, protocol=protocol,
                                            device=ctx.device)
        sequential_s = time.perf_counter() - started
        worst, score_diff = 0.0, 0.0
        for run, body in sequential.items():
            s.check(f"{family} lr={run[0]:g} seed={run[1]}: both engines ok",
                    0.0 if body["status"] == grid[run]["status"] == "ok" else 1.0, 0.0)
            worst = max(worst, curve_difference([x for _, x in grid[run]["curve"]], [x for _, x in body["curve"]]))
            score_diff = max([score_diff, *(abs(grid[run]["scores"][k] - v) for k, v in body["scores"].items()
                                            if isinstance(v, (int, float)))])
        s.check(f"{family} loss curves, batched vs sequential ({f['dtype']}, relative)", worst, ENGINE_TOL[f["dtype"]])
        seq_rate, batch_rate = len(sequential) / sequential_s * 3600, len(runs) / batched_s * 3600
        s.numbers[family] = {"sequential runs/h": round(seq_rate), "batched runs/h": round(batch_rate),
                             "batched / sequential": round(batch_rate / seq_rate, 2), "runs": len(runs),
                             "max score difference": round(score_diff, 3)}
    return s


# ---- FSDP2 through torchrun ----------------------------------------------------------------------------------


def fsdp2(ctx) -> Section:
    import yaml

    s = Section(ctx)
    if ctx.device.type != "cuda":
        raise Skip("CUDA only (NCCL); FSDP2 under torchrun on CPU (gloo) is tests/distributed/test_parallel.py")
    gpus = torch.cuda.device_count()
    kwargs = {"objective": "clm:50%,mlm40:rest", "steps": 10, "eval_every": 0}
    reference = pretrain_config(ctx, "fsdp2-reference", "cuda", "fp32", **kwargs)
    launched = pretrain_config(ctx, "fsdp2-torchrun", "cuda", "fp32", **kwargs)
    (ctx.work / "fsdp2.yaml").write_text(yaml.safe_dump(launched.model_dump(mode="json")))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus), "-m",
               "encoderlab.cli", "pretrain", str(ctx.work / "fsdp2.yaml"), "--set", "train.parallel=fsdp2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    s.check(f"torchrun on {gpus} GPU(s) exits 0", float(done.returncode != 0), 0.0)
    if done.returncode != 0:
        s.numbers["stderr"] = done.stderr[-3000:]
        return s
    plain = train_losses(ctx, reference)
    fsdp = metrics_losses(ctx.work / "runs" / "fsdp2-torchrun")
    # CUDA draws other MLM masks on other ranks (docs/distributed.md): with several GPUs only the CLM half matches.
    compared = len(plain) if gpus == 1 else len(plain) // 2
    s.numbers["losses (fsdp2)"], s.numbers["losses (one process)"] = fsdp, plain
    s.check(f"FSDP2 x{gpus} vs one process, first {compared} steps (relative)",
            curve_difference(fsdp[:compared], plain[:compared]), FSDP_TOL)
    return s


# ---- speed ---------------------------------------------------------------------------------------------------


def time_fwd_bwd(attend, q, k, v, reps: int, grad: bool) -> float:
    """Median seconds of attend(q, k, v) (and its backward), after two warm-ups."""
    def once():
        out = attend(q, k, v)
        if grad:
            torch.autograd.grad(out, (q, k, v), out)
    times = []
    for i in range(reps + 2):
        synchronize(q.device)
        t = time.perf_counter()
        once()
        synchronize(q.device)
        if i >= 2:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def attention_speed(ctx) -> Section:
    from encoderlab.model.attention import for_finetuning

    s, shape = Section(ctx), ctx.sizes["attention_speed"]
    dtype = torch.bfloat16 if ctx.device.type == "cuda" else torch.float32
    docs = fineweb_like_doc_ids(shape["batch"], shape["seq_len"], seed=2, median=shape["median_doc"]).to(ctx.device)
    q, k, v, _ = (x.to(ctx.device, dtype).requires_grad_() for x in attention_inputs(shape, dtype, seed=3))
    grad_flex = ctx.device.type == "cuda"
    if not grad_flex:
        s.skip("flex backward timing", f"flex_attention has no backward on {ctx.device.type}: forward only")
    results = {}
    for name, backend, grad in (("flex", flex_backend(ctx.device, shape["seq_len"]), grad_flex),
                                ("dense", for_finetuning(ctx.device, shape["seq_len"]), True)):
        for causal in (True, False):
            started = time.perf_counter()
            attend = backend.layout(causal, docs, None)
            synchronize(ctx.device)
            layout_ms = (time.perf_counter() - started) * 1e3
            ms = time_fwd_bwd(attend, *(x if grad else x.detach() for x in (q, k, v)), shape["reps"], grad) * 1e3
            results[name, causal] = ms
            s.numbers[f"{name} {'causal' if causal else 'bidirectional'}"] = {
                "ms (fwd+bwd)" if grad else "ms (fwd)": round(ms, 3), "layout ms": round(layout_ms, 2)}
    for causal in (True, False):
        tag = "causal" if causal else "bidirectional"
        s.numbers[f"flex speed-up over dense, {tag} (target >= 1.5x)"] = round(
            results["dense", causal] / results["flex", causal], 2)
    s.numbers["shape"] = {**shape, "dtype": str(dtype), "documents per window (mean)": round(
        sum(len(torch.unique(r)) for r in docs.cpu()) / len(docs), 1)}
    return s


def pretrain_speed(ctx) -> Section:
    import pretrain_throughput as pt

    from encoderlab.runs.optim import resolve_dtype

    s, p = Section(ctx), ctx.sizes["pretrain_speed"]
    dtype = resolve_dtype("auto", ctx.device.type)  # bf16 on the GPU; on a CPU without native bf16 (smoke), fp32
    peak = pt.peak_flops(ctx.device, reps=p["peak_reps"], dtype=dtype, n=p.get("peak_n"))
    s.numbers["matmul peak TFLOP/s (measured)"] = {"dtype": dtype, "TFLOP/s": float(f"{peak / 1e12:.4g}")}
    compiles = (True,) if ctx.device.type == "cuda" else (False,)
    if ctx.device.type == "cuda":
        s.skip("eager", "the targets are compiled figures; `pretrain_throughput.py` without --compile measures eager")
    else:
        s.skip("compile", "inductor on CPU compiles for 10-40 s; `make bench` and tests/distributed cover it")
        s.skip("peak memory", "on CPU it needs a fresh process per measurement: `make bench` measures it")
    rows = []
    for preset in p["presets"]:
        for compile_ in compiles:
            for objective in ("mlm40", "clm"):
                rows.append(_speed_row(ctx, pt, pt.Shape(preset, objective, p["batch"], p["seq_len"], compile_, dtype),
                                       p, peak, targeted=preset == p["presets"][0]))
    s.numbers["rows"] = rows
    return s


def _speed_row(ctx, pt, shape, p, peak: float, targeted: bool) -> dict:
    row = pt.bench(shape, p["reps"], p["warmup"], peak, ctx.device)
    if ctx.device.type == "cuda":
        for impl in pt.IMPLEMENTATIONS:
            row[impl]["peak_memory_mib"] = round(pt.peak_memory(impl, shape, ctx.device) / 2**20)
    if targeted:
        row[SPEED_TARGET] = row["encoderlab"]["mfu"] >= 0.50 and row["ratio"] >= 1.5
    ctx.log(f"  {shape.preset} {shape.objective} compile={shape.compile}: {row['encoderlab']} vs {row['transformers']}")
    return row


SPEED_TARGET = "targets met (MFU >= 50%, >= 1.5x)"


# ---- running them --------------------------------------------------------------------------------------------

SECTIONS = {"attention": attention, "lm-loss": lm_loss, "pretraining": pretraining, "continued": continued,
            "finetuning": finetuning,
            "fsdp2": fsdp2, "attention-speed": attention_speed, "pretrain-speed": pretrain_speed}
TINY_MODEL = {"preset": "tiny", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2}
SIZES = {
    "full": {"attention": {"batch": 2, "seq_len": 2048, "heads": 12, "kv_heads": 12, "head_dim": 64,
                           "median_doc": 400},
             "lm_loss": (4096, 768, 128256), "lm_loss_speed_rows": 16384,
             "pretrain": {"model": {"preset": "tiny"}, "seq_len": 256, "batch": 16, "steps": 50},
             "finetune": {"steps": 30, "batch": 32, "examples": 200, "max_length": 128, "dtype": "bf16",
                          "lrs": [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4], "seeds": [0, 1, 2, 3, 4],
                          "sequential_runs": 6},
             "attention_speed": {"batch": 8, "seq_len": 2048, "heads": 12, "kv_heads": 12, "head_dim": 64,
                                 "median_doc": 400, "reps": 20},
             "pretrain_speed": {"presets": ["210m", "610m"], "batch": 8, "seq_len": 2048, "reps": 10, "warmup": 3,
                                "peak_reps": 20}},
    "smoke": {"attention": {"batch": 2, "seq_len": 96, "heads": 4, "kv_heads": 2, "head_dim": 16, "median_doc": 16},
              "lm_loss": (64, 32, 500), "lm_loss_speed_rows": 64,
              "pretrain": {"model": TINY_MODEL, "seq_len": 64, "batch": 4, "steps": 6},
              "finetune": {"steps": 4, "batch": 4, "examples": 12, "max_length": 48, "dtype": "fp32",
                           "lrs": [1e-3, 3e-3], "seeds": [0], "sequential_runs": 2},
              "attention_speed": {"batch": 1, "seq_len": 64, "heads": 2, "kv_heads": 2, "head_dim": 16,
                                  "median_doc": 16, "reps": 1},
              "pretrain_speed": {"presets": ["tiny"], "batch": 1, "seq_len": 32, "reps": 1, "warmup": 0,
                                 "peak_reps": 1, "peak_n": 256}},
}


def environment(device: torch.device) -> dict:
    import transformers

    return {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else
            platform.processor() or platform.machine(), "gpus": torch.cuda.device_count(),
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "date": datetime.date.today().isoformat(), "threads": torch.get_num_threads()}


def run_all(device_name: str, smoke: bool, only: list[str] | None, log=print) -> dict:
    device = torch.device("cuda" if device_name == "auto" and torch.cuda.is_available() else
                          "cpu" if device_name == "auto" else device_name)
    unknown = sorted(set(only or []) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"--only {' '.join(unknown)}: the sections are {', '.join(SECTIONS)}")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        ctx = SimpleNamespace(device=device, sizes=SIZES["smoke" if smoke else "full"], work=Path(work),
                              checkpoint=None, log=log)
        report = {**environment(device), "smoke": smoke, "sections": {}}
        log(f"gpu-check on {report['device_name']} ({device}), torch {report['torch']}, transformers "
            f"{report['transformers']}{', smoke shapes' if smoke else ''}")
        for name, section in SECTIONS.items():
            if only and name not in only:
                continue
            log(f"[{name}]")
            report["sections"][name] = run_section(section, ctx, log)
    return report


def run_section(section, ctx, log) -> dict:
    """One section's outcome: a failing section is recorded and the others still run (device time is scarce)."""
    # Each section compiles as a fresh process would: compiled functions share one cache per code object (the
    # compiled flex_attention's too), and the sections' many shapes and dtypes would otherwise exhaust its
    # recompile limit, after which a later section times the eager fallback (seen: flex 37 ms instead of ~1.5).
    torch._dynamo.reset()
    started = time.perf_counter()
    try:
        s = section(ctx)
    except Skip as e:
        log(f"  skipped: {e}")
        return {"status": "skipped", "reason": str(e), "seconds": round(time.perf_counter() - started, 1)}
    except Exception:
        log(traceback.format_exc())
        return {"status": "failed", "error": traceback.format_exc()[-3000:],
                "seconds": round(time.perf_counter() - started, 1)}
    status = "failed" if any(not c["ok"] for c in s.checks) else "passed"
    return {"status": status, "checks": s.checks, "numbers": s.numbers, "skipped": s.skipped,
            "seconds": round(time.perf_counter() - started, 1)}
