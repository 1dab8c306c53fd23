"""Sweep throughput: encoderlab's LR x seed sweep against the Hugging Face Trainer way, in runs per hour.

The paper's protocol shape (6 LRs x 5 seeds = 30 runs per task, batch 32; fewer steps than its 1,000, `--steps`)
on one task of each family. encoderlab runs `run_sweep` twice per task, with the sequential and the batched engine
(each timed from checkpoint load to the last record, tokenisation into a fresh cache included); the baseline fine-
tunes the same checkpoint, exported as a transformers EuroBERT folder, with `Trainer` and the same hyper-parameters,
one process per run (`hf_finetune.py`), as evaluation scripts launched per (LR, seed) do, so interpreter start,
imports, model load and tokenisation count for every run. Both sides score validation and test with the same
example caps. Printed: runs/hour of each side, the ratio per family and for the whole sweep.

    python benchmarks/sweep_throughput.py                        # 4 tasks x 30 runs x 30 steps
    python benchmarks/sweep_throughput.py --quick                # smoke test: 2 x 2 runs, 3 steps, tiny caps
    python benchmarks/sweep_throughput.py --tasks rt-polarity --steps 100 --json bench.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from encoderlab.core.config import load_yaml
from encoderlab.core.process import keep_freed_memory, keep_freed_memory_env
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.finetuning.task_prep import prepare_tasks
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.runs import checkpoint as ckpt
from encoderlab.tasks.base import EvalTask

ROOT = Path(__file__).resolve().parents[1]
HF_SCRIPT = Path(__file__).resolve().parent / "hf_finetune.py"
DEFAULT_TASKS = ["rt-polarity", "conll-ner", "wiki-cloze", "wiki-title"]


def build_protocol(args, context: int) -> Protocol:
    """The protocol both sides run, for a checkpoint of `context` positions (what `max_length: auto` reads)."""
    data = Protocol.model_validate(load_yaml(args.protocol)).model_dump()  # its variant's settings written out
    data.update({"name": "bench", "max_steps": args.steps, "batch_size": args.batch, "lrs": args.lrs,
                 "seeds": args.seeds, "max_eval_examples": args.max_eval_examples})
    # QA as span extraction on both sides: the baseline is transformers' run_qa.py way (stride windows, n-best
    # spans); the authors' answer-token tagging has no transformers recipe to compare with.
    data["qa"] = {**data.get("qa", {}), "format": "spans"}
    # Each task is timed alone and trained on its own pairs, as the Trainer baseline is: no shared retrieval trainer.
    retrieval = data["retrieval"] = {**data.get("retrieval", {}), "train_on": None}
    corpus = retrieval.get("corpus", "all")
    if args.max_corpus_documents is not None:
        if corpus != "all":  # the protocol refuses both: random extra documents vs only the judged ones
            raise SystemExit(f"--max-corpus-documents: {args.protocol} says retrieval.corpus: {corpus} (only the "
                             "judged documents are searched); leave the option out or use a protocol with corpus: all")
        data["max_corpus_documents"] = args.max_corpus_documents
    elif args.quick and corpus == "all":
        data["max_corpus_documents"] = 200
    if args.max_length:
        data.update({"max_length": args.max_length, "max_length_by_family": {}})
    if args.dtype:
        data["dtype"] = args.dtype
    return Protocol(**data).with_context(context)


# ------------------------------------------------------------------------------------------------ the baseline's data


def write_jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def write_hf_data(task: EvalTask, folder: Path) -> Path:
    """The task's examples, after the protocol's subsampling, in the plain files hf_finetune.py reads."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"name": task.name, "family": task.family}
    if task.family == "retrieval":
        # The texts exactly as encoderlab encodes them ("Query: ...", "Document: title text"), the queries and
        # qrels left by subsampling, and the searched corpus (the protocol's cap). Private fields: no public view.
        docs = dict(zip(task.doc_ids, task._doc_texts))  # type: ignore[attr-defined]
        searched = task.doc_ids if task._searched is None else [task.doc_ids[i] for i in task._searched]  # type: ignore[attr-defined]
        needed = set(searched) | {d for rel in task.qrels.get("train", {}).values() for d in rel}
        write_jsonl(folder / "corpus.jsonl", ({"_id": d, "text": docs[d]} for d in task.doc_ids if d in needed))
        write_jsonl(folder / "queries.jsonl", ({"_id": q, "text": t} for q, t in
                                               zip(task.query_ids, task._query_texts)))  # type: ignore[attr-defined]
        (folder / "qrels.json").write_text(json.dumps(task.qrels))
        (folder / "searched.json").write_text(json.dumps(list(searched)))
    else:
        for split in ("train", "validation", "test"):
            write_jsonl(folder / f"{split}.jsonl", task.splits[split])  # type: ignore[attr-defined]
        if task.family in ("classification", "tokens"):
            meta["labels"] = task.labels  # type: ignore[attr-defined]
        if task.family == "classification":
            meta["text_fields"] = list(task.text_fields)  # type: ignore[attr-defined]
    (folder / "task.json").write_text(json.dumps(meta))
    return folder


# ------------------------------------------------------------------------------------------------ the two sides


def time_encoderlab(args, spec: str, protocol: Protocol, work: Path, engine: str) -> dict:
    # A fresh cache: tokenisation counts. A spec may be a task file's path: one folder name, never a path below.
    out, cache = work / "evals" / engine, work / "cache" / engine / spec.replace("/", "_")
    # "workers": sequential runs spread over --workers processes, each with its share of the threads.
    workers = args.workers if engine == "workers" else 1
    started = time.perf_counter()
    summary = run_sweep(args.checkpoint, [spec], protocol, out, engine="sequential" if engine == "workers" else engine,
                        workers=workers, cache_dir=cache, show_progress=False,
                        log=lambda m: print(f"    {m}", file=sys.stderr) if args.verbose else None)
    seconds = time.perf_counter() - started
    (entry,) = summary["tasks"].values()
    return {"seconds": round(seconds, 1), "runs": summary["runs_done_this_time"], "failed": entry["failed"],
            "test_at_best_lr": entry.get("test")}


def time_transformers(args, protocol: Protocol, family: str, export: Path, data: Path) -> dict:
    runs = [(lr, seed) for lr in protocol.lrs for seed in protocol.seeds]
    if args.hf_runs:
        runs = runs[:: max(1, len(runs) // args.hf_runs)][: args.hf_runs]  # spread over the grid
    warmup = round(protocol.warmup_fraction * protocol.max_steps)
    o = protocol.optim
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    if args.keep_freed:  # the allocator setting encoderlab's side runs with (core/process.py keep_freed_memory)
        env.update(keep_freed_memory_env())
    sampling = args.hf_sampling or ("group_by_length" if protocol.batch_order == "length_buckets" else "random")
    seconds, failed, scores = 0.0, 0, []
    for lr, seed in runs:
        command = [sys.executable, str(HF_SCRIPT), "--model", str(export), "--data", str(data), "--lr", str(lr),
                   "--seed", str(seed), "--steps", str(protocol.max_steps), "--warmup-steps", str(warmup),
                   "--batch", str(protocol.batch_size), "--eval-batch", str(protocol.eval_batch_size),
                   "--max-length", str(protocol.length_for(family)), "--betas", *map(str, o.betas),
                   "--eps", str(o.eps), "--weight-decay", str(o.weight_decay), "--grad-clip", str(o.grad_clip),
                   "--sampling", sampling, "--weights", protocol.weights,
                   *(["--bf16"] if protocol.dtype == "bf16" else []),
                   *(["--threads", str(args.threads)] if args.threads else [])]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        seconds += time.perf_counter() - started
        if done.returncode != 0:
            failed += 1
            print(f"    transformers run lr={lr:g} seed={seed} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        scores.append(json.loads(done.stdout.strip().splitlines()[-1])["scores"]["test"])
        if args.verbose:
            print(f"    transformers lr={lr:g} seed={seed}: {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return {"seconds": round(seconds, 1), "runs": len(runs), "failed": failed,
            "mean_test": round(sum(scores) / len(scores), 2) if scores else None}


def per_hour(side: dict) -> float:
    return side["runs"] / side["seconds"] * 3600 if side["seconds"] > 0 else float("nan")


# ------------------------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(ROOT / "runs" / "demo-tiny-mlm40"),
                   help="a checkpoint or run folder (its latest checkpoint)")
    p.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, help="one task per family, by default")
    p.add_argument("--protocol", type=Path, default=ROOT / "configs" / "eval" / "paper.yaml",
                   help="hyper-parameters, dtype and lengths; steps, grid and caps come from the options below")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--max-length", type=int, default=None, help="one length for every family (default: protocol's)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="default: the protocol's")
    p.add_argument("--max-eval-examples", type=int, default=500, help="validation/test examples scored per run")
    p.add_argument("--max-corpus-documents", type=int, default=None,
                   help="retrieval: documents searched (only where the protocol's retrieval.corpus is 'all')")
    p.add_argument("--engines", nargs="+", default=["sequential", "batched", "workers"],
                   choices=["sequential", "batched", "workers"],
                   help="'workers': sequential runs on --workers processes sharing the threads")
    p.add_argument("--workers", type=int, default=2, help="processes of the 'workers' engine")
    p.add_argument("--hf-runs", type=int, default=None,
                   help="time only this many Trainer runs per task, spread over the grid (runs/hour is a rate)")
    p.add_argument("--hf-sampling", default=None,
                   help="Trainer's train_sampling_strategy (default: the protocol's batch_order, length_buckets as "
                        "group_by_length, random as random)")
    p.add_argument("--threads", type=int, default=None, help="torch threads on both sides (default: torch's)")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 LRs x 2 seeds, 3 steps, small caps")
    p.add_argument("--json", type=Path, default=None, help="also write every number here")
    p.add_argument("--keep", action="store_true", help="keep the work folder (export, data, records)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.lrs, args.seeds, args.steps = [1e-4, 1e-3], [0, 1], 3
        args.max_eval_examples = 32
        args.max_length = args.max_length or 64
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.keep_freed = keep_freed_memory()  # as the encoderlab command does for itself and its workers
    _, model_cfg, tokenizer = ckpt.load_model(args.checkpoint)
    protocol = build_protocol(args, model_cfg.max_position_embeddings)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    print(f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}; {len(protocol.lrs)} LRs x "
          f"{len(protocol.seeds)} seeds, {protocol.max_steps} steps, batch {protocol.batch_size}, {protocol.dtype} "
          f"({protocol.weights} weights), batch order {protocol.batch_order}, QA as spans on both sides; "
          f"work folder {work}")
    try:
        export = work / "eurobert"
        export_checkpoint(args.checkpoint, export, "eurobert")
        rows = []
        for spec in args.tasks:
            (task,) = prepare_tasks([spec], tokenizer, protocol, cache_dir=None, log=lambda m: None)
            data = write_hf_data(task, work / "data" / task.name)
            row = {"task": task.name, "family": task.family}
            order = args.engines if len(rows) % 2 == 0 else args.engines[::-1]  # no engine always goes first
            for engine in order:  # the sides take turns per task, so drift in machine speed hits all
                row[engine] = time_encoderlab(args, spec, protocol, work, engine)
                print(f"  {task.name}: encoderlab {engine}: {row[engine]}", flush=True)
            row["transformers"] = time_transformers(args, protocol, task.family, export, data)
            print(f"  {task.name}: transformers Trainer: {row['transformers']}", flush=True)
            rows.append(row)
        report(args, rows)
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "device": device,
                                             "threads": torch.get_num_threads(), "rows": rows}, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(args, rows: list[dict]) -> None:
    engines = args.engines
    head = ["family", "task", *[f"{e} runs/h" for e in engines], "transformers runs/h", "best / transformers"]
    lines = [head]
    totals = {side: {"runs": 0, "seconds": 0.0} for side in (*engines, "transformers")}
    for row in rows:
        best = max(per_hour(row[e]) for e in engines)
        lines.append([row["family"], row["task"], *[f"{per_hour(row[e]):,.0f}" for e in engines],
                      f"{per_hour(row['transformers']):,.0f}", f"{best / per_hour(row['transformers']):.1f}x"])
        for side in totals:
            totals[side]["runs"] += row[side]["runs"]
            totals[side]["seconds"] += row[side]["seconds"]
    best = max(per_hour(totals[e]) for e in engines)
    lines.append(["all", "whole sweep", *[f"{per_hour(totals[e]):,.0f}" for e in engines],
                  f"{per_hour(totals['transformers']):,.0f}", f"{best / per_hour(totals['transformers']):.1f}x"])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    print()
    for line in lines:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)))
    if {"batched", "sequential"} <= set(engines):
        ratios = [per_hour(r["batched"]) / per_hour(r["sequential"]) for r in rows]
        print("batched / sequential: " + ", ".join(f"{r['task']} {x:.2f}x" for r, x in zip(rows, ratios)))
    if {"workers", "sequential"} <= set(engines):
        ratios = [per_hour(r["workers"]) / per_hour(r["sequential"]) for r in rows]
        print(f"{args.workers} workers / sequential: "
              + ", ".join(f"{r['task']} {x:.2f}x" for r, x in zip(rows, ratios)))
    failed = {side: sum(r[side]["failed"] for r in rows) for side in totals}
    if any(failed.values()):
        print(f"WARNING: failed runs (counted in the rates above): {failed}")
    print("scores (sanity, not a comparison: the heads differ): " + "; ".join(
        f"{r['task']} encoderlab test at best LR {r[engines[0]]['test_at_best_lr']}, transformers mean test "
        f"{r['transformers']['mean_test']}" for r in rows))


if __name__ == "__main__":
    main()
