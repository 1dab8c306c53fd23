"""The redesign's baseline check: one fixed pretraining run and two fixed sweeps (both engines), reduced to digests of
what they wrote, so that two versions of encoderlab can be compared on one machine (weights bits depend on the CPU).

    python tools/baseline_check.py OUT.json      # run it (about 3 minutes on 2 cores; needs the offline data)
    python tools/baseline_check.py --compare A.json B.json

The runs: 30 steps of the `tiny` preset on `clm:50%,mlm40:50%`; rt-polarity and conll-ner swept for 20 steps at LR
3e-3, seeds 0 and 1, with the sequential and the batched engine; then one task of each family (rt-polarity,
conll-ner, wiki-cloze, wiki-title) for 10 steps, seed 0, under the demo protocol and under the authors' choices.
Records are compared without what changes from one run to the next (times, dates, paths, the host)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

VOLATILE = {"created", "finished", "started", "seconds", "time", "duration", "wall_seconds", "host", "timestamp",
            "train_seconds", "eval_seconds", "elapsed", "date", "path", "checkpoint", "records_root", "out",
            "encoderlab_version", "format_version"}  # a format version says how a record is written, not what it holds
ROOT = Path(__file__).resolve().parents[1]


def encoderlab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "encoderlab.cli", *args], check=True, stdout=subprocess.DEVNULL)


def steady(value):
    """A record without what changes from run to run."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in sorted(value.items()) if k not in VOLATILE and not k.endswith("_seconds")}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def digest_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def sweep(got: dict, ckpt: Path, evals: Path, engine: str, tasks: list[str], *sets: str,
          protocol: Path | None = None) -> None:
    encoderlab("sweep", str(ckpt), *tasks, *(["--protocol", str(protocol)] if protocol else []), "--set",
               "lrs=[3e-3]", *[a for s in sets for a in ("--set", s)], "--engine", engine, "--workers", "1",
               "--out", str(evals), "--json")
    for f in sorted(evals.rglob("*.json")):
        got[f"{evals.name}:{f.relative_to(evals)}"] = steady(json.loads(f.read_text()))


def run(out: Path) -> dict:
    got: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        encoderlab("pretrain", str(ROOT / "configs/pretrain/demo-tiny.yaml"), "--set", f"out_dir={tmp}/runs",
                   "--set", "name=base", "--set", "objective=clm:50%,mlm40:50%", "--set", "train.steps=30",
                   "--set", "train.save_every=30", "--set", "train.eval_every=30", "--set", "lr_schedule.decay_steps=5",
                   "--set", "lr_schedule.warmup_steps=5")
        ckpt = tmp / "runs/base"
        for f in sorted(ckpt.rglob("model.safetensors")):
            got[f"weights:{f.relative_to(ckpt)}"] = digest_file(f)
        for engine in ("sequential", "batched"):
            sweep(got, ckpt, tmp / f"evals-{engine}", engine, ["rt-polarity", "conll-ner"], "max_steps=20",
                  "seeds=[0,1]")
        # every family under both protocols: QA, retrieval (trained once on wiki-description), the authors' paths
        every = ["rt-polarity", "conll-ner", "wiki-cloze", "wiki-title"]
        sweep(got, ckpt, tmp / "evals-families", "sequential", every, "max_steps=10", "seeds=[0]",
              "max_eval_examples=100")
        sweep(got, ckpt, tmp / "evals-authors", "sequential", every, "max_steps=10", "seeds=[0]",
              "max_eval_examples=100", protocol=ROOT / "configs/eval/small-study-authors.yaml")
    out.write_text(json.dumps(got, indent=1, sort_keys=True))
    return got


def compare(a: dict, b: dict) -> int:
    bad = 0
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            bad += 1
            print(f"differs: {key}\n  {json.dumps(a.get(key))[:400]}\n  {json.dumps(b.get(key))[:400]}")
    print(f"{len(set(a) | set(b))} items, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(json.loads(Path(sys.argv[2]).read_text()), json.loads(Path(sys.argv[3]).read_text())))
    run(Path(sys.argv[1]))
