"""Continued MLM of a transformers encoder: encoderlab's pretraining loop against the obvious alternative, a
`transformers.Trainer` with `DataCollatorForLanguageModeling` (what `run_mlm.py` runs), on the same model, in one
process.

Both train the same random BERT or ModernBERT (written once by `save_pretrained`, with a 30,522-token word-level
tokenizer) on the same packed windows (synthetic documents of Zipf-distributed words, [CLS] doc [SEP] each), the same
batch, BERT's corruption (15% of tokens, 80% [MASK] / 10% random / 10% kept: `mlm15_801010` and
`mlm_probability=0.15`), AdamW at the same LR, the same dtype and threads. encoderlab keeps documents apart (block
mask or a row each, as the run's log says) and runs the head at the masked rows only; the Trainer attends across
the whole window and projects every position onto the vocabulary. Timed: each of encoderlab's loop steps
(`Trainer.train_step`: batch from the memory-mapped shards, masking, forward, backward, clipping, AdamW) and each of
transformers' Trainer steps (a callback's step begin to step end: collation, forward, backward, clipping, AdamW), in
alternating blocks so that drift in machine speed affects both; medians after warm-up.

    python benchmarks/continued_mlm_throughput.py                  # bert and modernbert, 2 threads
    python benchmarks/continued_mlm_throughput.py --quick --json   # smoke test: the default test suite runs it
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from encoderlab.core.config import validate
from encoderlab.data.documents import Document
from encoderlab.data.packing import pack
from encoderlab.data.tokenizer import load_tokenizer
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs.optim import resolve_dtype

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SHAPES = {  # small encoders of each family, the size a CPU continues in minutes
    "bert": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024},
    "modernbert": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 384,
                   "global_attn_every_n_layers": 2, "local_attention": 64, "bos_token_id": 2, "eos_token_id": 3,
                   "cls_token_id": 2, "sep_token_id": 3},
}
QUICK_SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def write_model(folder: Path, model_type: str, vocab_size: int, seq_len: int, quick: bool) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForMaskedLM, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + [f"w{i}" for i in range(len(SPECIALS), vocab_size)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    shape = {**SHAPES[model_type], **(QUICK_SHAPE if quick else {})}
    cfg = AutoConfig.for_model(model_type, vocab_size=vocab_size, max_position_embeddings=max(512, seq_len),
                               pad_token_id=0, **shape)
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(cfg).save_pretrained(folder)
    return folder


def documents(n: int, vocab_size: int, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(len(SPECIALS), vocab_size)]
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf: a few words common, most rare
    return [Document(f"d{i}", "synthetic", " ".join(rng.choices(words, weights, k=rng.randint(40, 400))))
            for i in range(n)]


def encoderlab_steps(work: Path, model: Path, packed: Path, args, dtype: str):
    cfg = validate(PretrainConfig, {
        "name": f"bench-{model.name}", "out_dir": str(work / "runs"), "data": {"path": str(packed)},
        "init": {"from_weights": str(model)}, "objective": "mlm15_801010", "optim": {"lr": 1e-4},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 10**6, "global_batch": args.batch, "dtype": dtype, "tensorboard": False}}, "benchmark")
    lines: list[str] = []
    trainer = Trainer(cfg, show_progress=False, log=lines.append)
    objective = cfg.phases[0].members[0]

    def step() -> float:
        started = time.perf_counter()
        trainer.train_step(objective)["loss"].item()  # the loop reads the loss every log_every steps
        trainer.step += 1
        return time.perf_counter() - started

    layout = next((line for line in lines if "documents stay apart" in line), "")
    return step, layout


def transformers_steps(model: Path, packed: Path, args, dtype: str):
    from transformers import (AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling, PrinterCallback,
                              Trainer, TrainerCallback, TrainingArguments)
    from transformers.utils import logging as hf_logging

    from encoderlab.data.loader import PackedDataset

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    windows = PackedDataset(packed, "train")
    examples = [{"input_ids": torch.from_numpy(windows.windows([i])[0][0]).long()} for i in range(len(windows))]
    tok = AutoTokenizer.from_pretrained(str(model))
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.started)

    def block(steps: int) -> list[float]:
        times.clear()
        hf = AutoModelForMaskedLM.from_pretrained(str(model), dtype=torch.float32) if not state else state[0]
        state[:] = [hf]
        trainer = Trainer(model=hf, args=TrainingArguments(
            output_dir=str(model.parent / "hf-trainer"), per_device_train_batch_size=args.batch, max_steps=steps,
            learning_rate=1e-4, lr_scheduler_type="constant", logging_steps=10**6, save_strategy="no",
            report_to=[], use_cpu=not torch.cuda.is_available(), bf16=dtype == "bf16", dataloader_num_workers=0,
            disable_tqdm=True, seed=0), train_dataset=examples,
            data_collator=DataCollatorForLanguageModeling(tok, mlm_probability=0.15), callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)  # its end-of-training line on stdout: this script prints a table
        trainer.train()
        return list(times)

    state: list = []
    return block


def bench(model_type: str, args, work: Path) -> dict:
    dtype = resolve_dtype(args.dtype, "cuda" if torch.cuda.is_available() else "cpu")
    model = write_model(work / model_type, model_type, args.vocab, args.seq_len, args.quick)
    docs = documents(args.documents, args.vocab)
    packed = work / f"packed-{model_type}"
    pack(docs, load_tokenizer(model, as_transformers=True), packed, seq_len=args.seq_len, val_fraction=0.01)
    ours, layout = encoderlab_steps(work, model, packed, args, dtype)
    theirs = transformers_steps(model, packed, args, dtype)
    times = {"encoderlab": [], "transformers": []}
    for rep in range(args.reps + 1):  # the first block of each warms up and is dropped
        for impl in ("encoderlab", "transformers") if rep % 2 == 0 else ("transformers", "encoderlab"):
            got = [ours() for _ in range(args.steps)] if impl == "encoderlab" else theirs(args.steps)
            if rep:
                times[impl] += got
    tokens = args.batch * args.seq_len
    result = {"model_type": model_type, "batch": args.batch, "seq_len": args.seq_len, "dtype": dtype,
              "threads": torch.get_num_threads(), "layout": layout}
    for impl, ts in times.items():
        result[impl] = {"tokens_per_s": round(tokens / statistics.median(ts)), "steps_timed": len(ts)}
    result["ratio"] = round(result["encoderlab"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 3)
    return result


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=sorted(SHAPES), choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--steps", type=int, default=4, help="steps per timed block")
    p.add_argument("--reps", type=int, default=3, help="timed blocks of each implementation, alternating")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smoke test (numbers are noise): tiny shapes, one step")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.seq_len, args.vocab, args.documents, args.steps, args.reps = 2, 32, 200, 60, 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="continued-mlm-") as tmp:
        results = [bench(m, args, Path(tmp)) for m in args.models]
    if args.json:
        print(json.dumps({"cpu": cpu_name(), "results": results}, indent=2))
        return
    print(f"{cpu_name()}, {torch.get_num_threads()} threads, batch {args.batch} x {args.seq_len} tokens, "
          f"median of {args.reps} x {args.steps} alternating steps each")
    print(f"{'model':<11} {'dtype':<5} {'encoderlab tok/s':>17} {'Trainer tok/s':>14} {'ratio':>6}  documents apart by")
    for r in results:
        print(f"{r['model_type']:<11} {r['dtype']:<5} {r['encoderlab']['tokens_per_s']:>17,} "
              f"{r['transformers']['tokens_per_s']:>14,} {r['ratio']:>6.2f}x  {r['layout'].split('apart by ')[-1]}")


if __name__ == "__main__":
    sys.exit(main())
