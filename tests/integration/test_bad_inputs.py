"""Bad inputs across the command line, one table: each is refused before any work, the way the conventions say.

Every case runs the real command line (in this process, for speed) and must: exit with code 2, print exactly one
line on stderr that starts with "error:" and contains the case's `says` text (what is wrong and where), print no
traceback, and leave no new or changed file under the test's folder.

A case's arguments may name `{tmp}` (the test's folder), `{packed}` (a small packed dataset), `{ckpt}` (a
checkpoint of a 2-step run, read-only for the cases) and `{run}` (that run's folder). `setup(tmp, ctx)` writes
the files a case needs before the folder is snapshotted; `ctx` holds the same names as the placeholders.
Sections are kept apart so that each area's cases are added in its own place.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_command
import yaml

from encoderlab.core.config import validate
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer

ROOT = Path(__file__).resolve().parents[2]
DEMO_TINY = ROOT / "configs" / "pretrain" / "demo-tiny.yaml"
SHIPPED = ROOT / "src" / "encoderlab" / "configs"  # where the configs shipped in the package are, links resolved


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    says: str
    setup: Callable[[Path, dict], None] | None = None
    without: str | None = None  # a module the case hides from import (an optional extra not installed)


def write(relative: str, content: str | bytes) -> Callable[[Path, dict], None]:
    """A setup that writes one file under the test's folder: text is formatted with the placeholders first."""
    def setup(tmp: Path, ctx: dict) -> None:
        path = tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.format(**ctx).encode())
    return setup


def two(*setups: Callable[[Path, dict], None]) -> Callable[[Path, dict], None]:
    def setup(tmp: Path, ctx: dict) -> None:
        for each in setups:
            each(tmp, ctx)
    return setup


def run_config(**changes) -> Callable[[Path, dict], None]:
    """A setup that writes `run.yaml`: a 2-step micro run on the small packed dataset, with `changes` merged in."""
    def setup(tmp: Path, ctx: dict) -> None:
        config = _micro_run(ctx["packed"], tmp / "runs")
        for key, value in changes.items():
            section, _, field = key.partition("__")
            if field:
                config.setdefault(section, {})[field] = value
            else:
                config[section] = value
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
    return setup


# A micro run whose second `optim:` block would drop the first block's lr if YAML's last-wins were taken.
OPTIM_TWICE = ("name: run\nout_dir: {tmp}/runs\ndata: {{path: {packed}}}\noptim:\n  lr: 1.0e-3\n"
               "optim:\n  weight_decay: 0.1\nmodel: {{preset: micro, num_hidden_layers: 1}}\n"
               "train: {{steps: 2, global_batch: 2, dtype: fp32, tensorboard: false}}\n")


def _micro_run(packed: Path, out_dir: Path) -> dict:
    return {"name": "run", "out_dir": str(out_dir), "data": {"path": str(packed)},
            "model": {"preset": "micro", "num_hidden_layers": 1},
            "lr_schedule": {"warmup_steps": 1, "decay_steps": 1},
            "train": {"steps": 2, "global_batch": 2, "dtype": "fp32", "tensorboard": False}}


# ------------------------------------------------------------------------------------------ command line, configs
CLI_CASES = [
    Case("pretrain-missing-config", ("pretrain", "{tmp}/missing.yaml"), "config file not found"),
    Case("pretrain-unknown-key", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "train.stepz=3"),
         "train.stepz: unknown key"),
    Case("pretrain-misspelled-section", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "trian.steps=20"),
         "--set trian.steps=20: trian: unknown key (did you mean 'train'?; allowed: data, init, lr_schedule,"),
    Case("pretrain-misspelled-key", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "train.stpes=20"),
         "--set train.stpes=20: train.stpes: unknown key (did you mean 'train.steps'?; allowed in train: "),
    Case("pretrain-unknown-objective", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "objective=xlm"),
         "unknown objective 'xlm'", run_config()),
    Case("pretrain-warmup-past-end", ("pretrain", "{tmp}/run.yaml"), "warmup", run_config(lr_schedule__warmup_steps=9)),
    Case("pretrain-lr-infinite", ("pretrain", "{tmp}/run.yaml"), "optim.lr: Input should be a finite number",
         run_config(optim__lr=float("inf"))),
    Case("pretrain-beta-of-one-or-more", ("pretrain", "{tmp}/run.yaml"), "optim.betas.0: Input should be less than 1",
         run_config(optim__betas=[1.5, 0.9])),
    Case("pretrain-model-field-unknown", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "model.hiden_size=64"),
         "--set model.hiden_size=64: model.hiden_size: unknown key (did you mean 'model.hidden_size'?; allowed in "
         "model: attention_bias,",
         run_config()),
    Case("pretrain-model-heads-do-not-divide", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set",
                                                "model.num_attention_heads=3"),
         "--set model.num_attention_heads=3: model.num_attention_heads: with preset 'micro', hidden_size=",
         run_config()),
    Case("pretrain-override-blamed", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "optim.lr=-1"),
         "--set optim.lr=-1: optim.lr: Input should be greater than 0"),
    Case("pretrain-override-not-key-value", ("pretrain", str(DEMO_TINY), "--set", "train.steps"), "section.key=value"),
    Case("pretrain-replace-of-no-key", ("pretrain", str(DEMO_TINY), "--set", "!={{steps: 3}}"), "section!=value"),
    Case("pretrain-replaced-section-unknown-key", ("pretrain", str(DEMO_TINY), "--dry-run", "--set",
                                                   "lr_schedule!={{warmup_stepz: 1}}"),
         "--set lr_schedule!={{warmup_stepz: 1}}: lr_schedule.warmup_stepz: unknown key"),
    Case("pretrain-config-is-folder", ("pretrain", "{tmp}"), "is a folder"),
    Case("pretrain-config-bad-yaml", ("pretrain", "{tmp}/bad.yaml"), "bad.yaml:3:1: not valid YAML",
         write("bad.yaml", "a:\n  b: [1\n")),
    Case("pretrain-config-optim-twice", ("pretrain", "{tmp}/run.yaml"), "{tmp}/run.yaml:6:1: not valid YAML: key "
         "'optim' is given twice in one mapping (first on line 4): keep one", write("run.yaml", OPTIM_TWICE)),
    Case("pretrain-set-key-twice", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "optim={{lr: 1, lr: 2}}"),
         "key 'lr' is given twice in one mapping"),
    Case("pretrain-config-binary", ("pretrain", "{tmp}/bin.yaml"), "not valid YAML", write("bin.yaml", b"\xff\xfe")),
    Case("pretrain-config-a-list", ("pretrain", "{tmp}/list.yaml"), "mapping", write("list.yaml", "- a\n- b\n")),
    Case("pretrain-base-loop", ("pretrain", "{tmp}/loop.yaml"), "includes itself",
         write("loop.yaml", "base: loop.yaml\n")),
    Case("pretrain-base-not-a-path", ("pretrain", "{tmp}/run.yaml"), "{tmp}/run.yaml: base: 3: takes the path of "
         "a YAML config", write("run.yaml", "base: 3\n")),
    Case("pretrain-base-missing", ("pretrain", "{tmp}/sub/run.yaml"), "{tmp}/sub/run.yaml: base: other.yaml: config "
         "file not found: {tmp}/sub/other.yaml ('other.yaml' read from the folder of {tmp}/sub/run.yaml)",
         write("sub/run.yaml", "base: other.yaml\n")),
    Case("pretrain-no-data", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "data.path={tmp}/nodata"),
         "no packed dataset at", run_config()),
    Case("pretrain-micro-batch", ("pretrain", "{tmp}/run.yaml", "--set", "train.micro_batch=3"),
         "micro_batch 3 must divide", run_config()),
    Case("pretrain-save-at-past-end", ("pretrain", "{tmp}/run.yaml", "--set", "train.save_at=[5]"), "save_at",
         run_config()),
    Case("pretrain-cuda-without-gpu", ("pretrain", "{tmp}/run.yaml", "--set", "train.device=cuda"), "CUDA",
         run_config()),
    Case("pretrain-cuda-dry-run", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "train.device=cuda"), "CUDA",
         run_config()),
    Case("pretrain-flex-on-cpu-dry-run", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "train.attention=flex",
                                          "--set", "train.device=cpu"), "flex needs a CUDA device", run_config()),
    Case("pretrain-constant-schedule-over-the-file-decay", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set",
                                                            "lr_schedule={{kind: constant, warmup_steps: 1}}"),
         "--set lr_schedule={{kind: constant, warmup_steps: 1}}: lr_schedule: kind 'constant' has no decay, yet this "
         "lr_schedule holds decay_steps: 1", run_config()),
    Case("pretrain-branch-source-missing", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set",
                                            "init.branch_from={tmp}/nowhere"), "{tmp}/nowhere is neither a checkpoint",
         run_config()),
    Case("pretrain-schedule-too-long", ("pretrain", "{tmp}/run.yaml", "--set", "objective=clm:8,mlm40:3"),
         "give [8, 3] steps", run_config()),
    Case("pretrain-existing-run", ("pretrain", "{tmp}/run.yaml", "--set", "out_dir={run}/.."),
         "already holds a run", run_config()),
    Case("data-prepare-missing-source", ("data", "prepare", "/no/such/file.jsonl", "--out", "{tmp}/o"),
         "no such file or directory"),
    Case("data-prepare-empty-folder", ("data", "prepare", "{tmp}/empty", "--out", "{tmp}/o"), "no supported files",
         write("empty/notes.md", "hello")),
    Case("data-prepare-text-column", ("data", "prepare", "{tmp}/c.jsonl", "--text-column", "text", "--out", "{tmp}/o"),
         "no column 'text' (it has: body)", write("c.jsonl", '{{"body": "one two three"}}\n')),
    Case("data-prepare-csv-text-column-named-twice", ("data", "prepare", "{tmp}/c.csv", "--out", "{tmp}/o"),
         "{tmp}/c.csv: line 1: column 'text' is named twice in the header; column names must be unique: rename one",
         write("c.csv", "text,text\none two,three four\n")),
    Case("data-prepare-jsonl-key-twice", ("data", "prepare", "{tmp}/c.jsonl", "--out", "{tmp}/o"),
         "{tmp}/c.jsonl: line 1: the key 'text' is given twice in one object; keys must be unique in an object",
         write("c.jsonl", '{{"text": "one two", "text": "three four"}}\n')),
    Case("data-prepare-seq-len-zero", ("data", "prepare", "offline", "--seq-len", "0", "--out", "{tmp}/o"),
         "--seq-len 0 is too small"),
    Case("data-prepare-jsonl-lone-surrogate", ("data", "prepare", "{tmp}/c.jsonl", "--out", "{tmp}/o"),
         "{tmp}/c.jsonl: line 1: the escape \\ud800 is half of a UTF-16 surrogate pair without its other half",
         write("c.jsonl", '{{"text": "three \\ud800 four"}}\n{{"text": "one two"}}\n')),
    Case("data-prepare-vocab-too-small", ("data", "prepare", "{tmp}/c.jsonl", "--vocab-size", "10", "--out", "{tmp}/o"),
         "--vocab-size 10 is too small", write("c.jsonl", '{{"text": "one two three"}}\n')),
    Case("data-prepare-shard-beyond", ("data", "prepare", "{tmp}/c.jsonl", "--shard", "3/2", "--out", "{tmp}/o"),
         "--shard '3/2' must be I/N with 0 <= I < N"),
    Case("data-prepare-shard-of-zero", ("data", "prepare", "{tmp}/c.jsonl", "--shard", "0/0", "--out", "{tmp}/o"),
         "--shard '0/0' must be I/N with 0 <= I < N"),
    Case("data-prepare-shard-without-tokenizer", ("data", "prepare", "{tmp}/c.jsonl", "--shard", "0/2", "--out",
                                                  "{tmp}/o"), "--shard needs --tokenizer"),
    Case("data-prepare-max-tokens-unreadable", ("data", "prepare", "{tmp}/c.jsonl", "--max-tokens", "100X", "--out",
                                                "{tmp}/o"), "--max-tokens '100X' is not a positive whole number"),
    Case("data-prepare-max-tokens-not-windows", ("data", "prepare", "offline", "--max-tokens", "1K", "--out",
                                                 "{tmp}/o"), "--max-tokens 1,000 must be a positive multiple of "
                                                             "--seq-len 512 (whole windows), e.g. 512"),
    Case("import-hf-missing", ("import-hf", "{tmp}/nomodel", "--out", "{tmp}/o"), "no such file or folder"),
    Case("import-hf-not-a-model", ("import-hf", "{tmp}", "--out", "{tmp}/o"), "has no config.json"),
    Case("import-hf-config-not-json", ("import-hf", "{tmp}/m", "--out", "{tmp}/o"), "{tmp}/m/config.json is not JSON",
         two(write("m/config.json", "{{not json"), write("m/tokenizer.json", "{{}}"))),

    Case("export-not-a-checkpoint", ("export", "{tmp}", "--out", "{tmp}/o"), "neither a checkpoint folder"),
    Case("finetune-zero-lr", ("finetune", "{ckpt}", "rt-polarity", "--lr", "0", "--out", "{tmp}/e"),
         "--lr 0: the learning rate must be a finite number greater than 0"),
    Case("finetune-negative-lr", ("finetune", "{ckpt}", "rt-polarity", "--lr", "-1e-3", "--out", "{tmp}/e"),
         "--lr -0.001: the learning rate must be a finite number greater than 0"),
    Case("finetune-infinite-lr", ("finetune", "{ckpt}", "rt-polarity", "--lr", "inf", "--out", "{tmp}/e"),
         "--lr inf: the learning rate must be a finite number greater than 0"),
    Case("finetune-negative-seed", ("finetune", "{ckpt}", "rt-polarity", "--lr", "1e-3", "--seed", "-1", "--out",
                                    "{tmp}/e"), "--seed -1: a seed is a whole number from 0 to 2**64 - 1"),
    Case("sweep-override-not-yaml", ("sweep", "{ckpt}", "rt-polarity", "--set", "lrs=[1e-3", "--out", "{tmp}/e"),
         "--set value '[1e-3' is not valid YAML"),
    Case("sweep-task-override-blamed", ("sweep", "{ckpt}", "rt-polarity", "--set", "task_overrides.rt-polarity.lr=5",
                                        "--set", "max_steps=1", "--out", "{tmp}/e"),
         "--set task_overrides.rt-polarity.lr=5: task_overrides.rt-polarity: lr cannot be set per task"),
    Case("sweep-task-override-value", ("sweep", "{ckpt}", "rt-polarity", "--set", "task_overrides.rt-polarity.epochs=0",
                                       "--out", "{tmp}/e"), "--set task_overrides.rt-polarity.epochs=0: "),
    Case("sweep-corpus-extras-over-judged", ("sweep", "{ckpt}", "rt-polarity", "--set", "max_corpus_documents=300",
                                             "--out", "{tmp}/e"),  # the default protocol searches judged documents
         "--set max_corpus_documents=300: max_corpus_documents adds random documents to the searched corpus; "
         "retrieval.corpus: judged searches only the judged ones: set one of them"),
    Case("sweep-lr-given-twice", ("sweep", "{ckpt}", "rt-polarity", "--set", "lrs=[1e-3,1e-3]", "--out", "{tmp}/e"),
         "lrs: 0.001 is given twice; list each value once"),
    Case("sweep-override-markup", ("sweep", "{ckpt}", "rt-polarity", "--set", "seeds=[a]", "--out", "{tmp}/e"),
         "--set seeds=[a]: seeds.0"),
    Case("pretrain-last-override-blamed", ("pretrain", str(DEMO_TINY), "--dry-run", "--set", "name=ok", "--set",
                                           "name=../x"), "--set name=../x: name: must be one folder name"),
    Case("sweep-unknown-protocol-key", ("sweep", "{ckpt}", "rt-polarity", "--set", "max_step=5", "--out", "{tmp}/e"),
         "--set max_step=5: max_step: unknown key (did you mean 'max_steps'?; allowed: "),
    Case("sweep-misspelled-protocol-section", ("sweep", "{ckpt}", "rt-polarity", "--set", "optm.lr=1", "--out",
                                               "{tmp}/e"),
         "--set optm.lr=1: optm: unknown key (did you mean 'optim'?; allowed: batch_order,"),
    Case("finetune-misspelled-protocol-section", ("finetune", "{ckpt}", "rt-polarity", "--lr", "1e-4", "--set",
                                                  "optm.lr=1", "--out", "{tmp}/e"),
         "--set optm.lr=1: optm: unknown key (did you mean 'optim'?; allowed: batch_order,"),
    Case("sweep-protocol-missing", ("sweep", "{ckpt}", "rt-polarity", "--protocol", "{tmp}/p.yaml", "--out", "{tmp}/e"),
         "config file not found"),
    # A shipped config's path typed outside a clone, or its name: refused, pointing to the shipped file (not read)
    Case("pretrain-shipped-config-elsewhere", ("pretrain", "{tmp}/configs/pretrain/demo-tiny.yaml"),
         f"config file not found: {{tmp}}/configs/pretrain/demo-tiny.yaml; encoderlab ships "
         f"configs/pretrain/demo-tiny.yaml: give its path, {SHIPPED}/pretrain/demo-tiny.yaml, or copy the shipped "
         f"configs here to edit them (cp -r {SHIPPED} .)"),
    Case("pretrain-shipped-config-by-name", ("pretrain", "demo-tiny", "--dry-run"),
         f"encoderlab ships configs/pretrain/demo-tiny.yaml: give its path, {SHIPPED}/pretrain/demo-tiny.yaml,"),
    Case("study-run-shipped-study-elsewhere", ("study", "run", "{tmp}/studies/demo.yaml"),
         f"encoderlab ships configs/studies/demo.yaml: give its path, {SHIPPED}/studies/demo.yaml,"),
    Case("study-copied-alone", ("study", "plan", "{tmp}/demo.yaml"), "study demo: pretrain: config file not found: "
         "{tmp}/../pretrain/cpu-study.yaml; encoderlab ships configs/pretrain/cpu-study.yaml: give its path,",
         write("demo.yaml", (ROOT / "configs" / "studies" / "demo.yaml").read_text().replace("{", "{{")
               .replace("}", "}}"))),
    Case("sweep-shipped-protocol-by-name", ("sweep", "{ckpt}", "rt-polarity", "--protocol", "demo", "--out",
                                            "{tmp}/e"),
         f"encoderlab ships configs/eval/demo.yaml: give its path, {SHIPPED}/eval/demo.yaml,"),
    Case("sweep-workers-zero", ("sweep", "{ckpt}", "rt-polarity", "--workers", "0", "--out", "{tmp}/e"),
         "--workers '0'"),
    Case("study-plan-mfu-over-one", ("study", "plan", str(ROOT / "configs" / "studies" / "demo.yaml"), "--gpu", "h100",
                                     "--mfu", "1.5"), "--mfu 1.5: give a fraction of the GPU's peak"),
    Case("study-plan-mfu-without-gpu", ("study", "plan", str(ROOT / "configs" / "studies" / "demo.yaml"),
                                        "--mfu", "0.3"),
         "--mfu 0.3 is the GPU-hours estimate's utilisation: give --gpu too (--gpu h100)"),
    Case("demo-negative-workers", ("demo", "--workers", "-1"), "--workers -1: give 0"),
    Case("sweep-unknown-engine", ("sweep", "{ckpt}", "rt-polarity", "--engine", "warp", "--out", "{tmp}/e"),
         "engine 'warp'"),
    Case("sweep-unknown-task", ("sweep", "{ckpt}", "no-such-task", "--out", "{tmp}/e"), "unknown task 'no-such-task'"),
    Case("sweep-not-a-checkpoint", ("sweep", "{tmp}", "rt-polarity", "--out", "{tmp}/e"),
         "neither an encoderlab checkpoint"),
    Case("pretrain-wandb-not-installed", ("pretrain", "{tmp}/run.yaml", "--set", "train.wandb.project=p"),
         "train.wandb: {{project: p}} asks for Weights & Biases logging, but wandb is not installed: pip install "
         "'encoderlab[wandb]'", run_config(), without="wandb"),
    Case("sweep-wandb-not-installed", ("sweep", "{ckpt}", "rt-polarity", "--set", "wandb.project=p", "--out",
                                       "{tmp}/e"), "wandb: {{project: p}} asks for Weights & Biases logging, but "
         "wandb is not installed", without="wandb"),
]

# ------------------------------------------------------------------------------------------ task files, sweeps
def task_files(yaml_text: str, **files: str) -> Callable[[Path, dict], None]:
    """A setup that writes `t.yaml` and its data files (`train_csv=...` becomes `train.csv`)."""
    def setup(tmp: Path, ctx: dict) -> None:
        for name, text in {"t.yaml": yaml_text, **{k.replace("_", "."): v for k, v in files.items()}}.items():
            write(name, text)(tmp, ctx)
    return setup


CSV = "text,label\n" + "".join(f"review {i},{'pos' if i % 2 else 'neg'}\n" for i in range(8))
CLS = "family: classification\ntrain: train.csv\nvalidation: train.csv\n"
CONLL = "Anna B-PER\nKarenina I-PER\nreads O\n\nOslo B-LOC\nsleeps O\n\n"
TOK = "family: tokens\ntrain: train.txt\nvalidation: train.txt\n"
SWEEP = ("sweep", "{ckpt}", "{tmp}/t.yaml", "--out", "{tmp}/o")
SQUAD = json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Anna reads in Oslo", "qas": [
    {"id": f"q{i}", "question": "who reads in Oslo today?", "answers": [{"text": "Anna", "answer_start": 0}]}]}
    for i in range(4)]}]}).replace("{", "{{").replace("}", "}}")  # written through str.format


def beir_files(tmp: Path, ctx: dict) -> None:
    """A retrieval task file `t.yaml` over a BEIR folder of six documents, one query each, two a split."""
    write("t.yaml", "family: retrieval\nfolder: beir\n")(tmp, ctx)
    write("beir/corpus.jsonl", "".join(f'{{{{"_id": "d{i}", "text": "the film {i} in Oslo"}}}}\n' for i in range(6)))(
        tmp, ctx)
    write("beir/queries.jsonl", "".join(f'{{{{"_id": "q{i}", "text": "film {i}"}}}}\n' for i in range(6)))(tmp, ctx)
    for split, ids in (("train", range(2)), ("dev", range(2, 4)), ("test", range(4, 6))):  # no test answer trained on
        write(f"beir/qrels/{split}.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                               for i in ids))(tmp, ctx)


FINETUNE_SAVE = ("finetune", "{ckpt}", "{tmp}/t.yaml", "--lr", "1e-3", "--out", "{tmp}/o", "--save")
TASK_CASES: list[Case] = [
    Case("task-csv-not-utf8", SWEEP, "{tmp}/train.csv:3: not UTF-8 text (invalid start byte: byte 0xff at column 1)",
         task_files(CLS, train_csv=b"text,label\nfine,pos\n\xff\xfe latin-1,neg\n")),
    Case("task-csv-quote-left-open", SWEEP, "{tmp}/train.csv:3: 1 field(s) where the header has 2 (a delimiter in an "
         "unquoted field, or a quote left open?)",
         task_files(CLS, train_csv='text,label\nfine,pos\n"open,neg\n' + "x" * 200_000 + ",pos\nb,neg\n")),
    Case("task-csv-row-of-three-fields", SWEEP, "{tmp}/train.csv:4: 3 field(s) where the header has 2",
         task_files(CLS, train_csv="text,label\nfine,pos\nbad,neg\nreally, good,pos\n")),
    Case("task-csv-column-named-twice", SWEEP, "{tmp}/train.csv:1: column 'label' is named twice in the header; "
         "column names must be unique: rename one",
         task_files(CLS, train_csv="text,label,label\nfine,pos,1\nbad,neg,0\n")),
    Case("task-jsonl-key-given-twice", SWEEP, "{tmp}/train.jsonl:2: the key 'label' is given twice in one object; "
         "keys must be unique in an object: remove or rename one",
         task_files(CLS.replace(".csv", ".jsonl"), train_jsonl='{{"text": "fine", "label": "pos"}}\n'
                    '{{"text": "bad", "label": "pos", "label": "neg"}}\n{{"text": "dull", "label": "neg"}}\n')),
    Case("task-squad-key-given-twice", SWEEP, "{tmp}/train.json:1: the object at column 83 gives the key 'id' twice",
         task_files("family: qa\ntrain: train.json\nvalidation: train.json\n",
                    train_json=SQUAD.replace('"id": "q0"', '"id": "q0", "id": "q9"'))),
    Case("task-csv-header-only", SWEEP, "{tmp}/train.csv: no rows (an empty file, or a header only)",
         task_files(CLS, train_csv="text,label\n")),
    Case("task-missing-file", SWEEP, "task file {tmp}/t.yaml: train: {tmp}/nope.csv ('nope.csv' read from the task "
         "file's folder, {tmp}) does not exist",
         task_files("family: classification\ntrain: nope.csv\nvalidation: nope.csv\n")),
    Case("task-file-not-found", ("sweep", "{ckpt}", "{tmp}/sst2.yaml", "--out", "{tmp}/o"),  # was "config file"
         "task file not found: {tmp}/sst2.yaml; 'sst2', without .yaml, is the paper's dataset of that name"),
    Case("finetune-task-file-not-found", ("finetune", "{ckpt}", "{tmp}/bbc.yaml", "--lr", "1e-3", "--out", "{tmp}/o"),
         "error: task file not found: {tmp}/bbc.yaml"),
    Case("task-labels-numbers-and-names", SWEEP, "{tmp}/train.csv: column 'label' mixes numbers and names as labels "
         "(row 3: '1'; row 1: 'pos')", task_files(CLS, train_csv="text,label\na,pos\nb,neg\nc,1\nd,neg\n")),
    Case("task-file-is-a-folder", SWEEP, "task file {tmp}/t.yaml: test: {tmp}/o2 ('o2' read from the task file's "
         "folder, {tmp}) is a folder; give a file",
         two(task_files(CLS + "test: o2\n", train_csv=CSV), lambda tmp, ctx: (tmp / "o2").mkdir())),
    Case("task-file-is-a-pipe", SWEEP, "task file {tmp}/t.yaml: train: /dev/null is neither a file nor a folder (a "
         "device, a pipe or a socket); give a file", task_files("family: classification\ntrain: /dev/null\n"
                                                                 "validation: /dev/null\n")),
    Case("task-beir-corpus-a-device", SWEEP, "{tmp}/beir is not a BEIR-layout folder: corpus.jsonl is not a file (it "
         "leads to /dev/zero)", two(beir_files, lambda tmp, ctx: (
             (tmp / "beir/corpus.jsonl").unlink(), (tmp / "beir/corpus.jsonl").symlink_to("/dev/zero")))),
    Case("task-named-like-the-summary", SWEEP, "summary.json is the name of the sweep's summary",
         task_files(CLS + "name: summary.json\n", train_csv="text,label\na,x\nb,y\n")),
    Case("task-file-name-unsafe", ("sweep", "{ckpt}", "{tmp}/my bbc.yaml", "--out", "{tmp}/o"),
         "the task is named after its file, 'my bbc', but a task name is",
         lambda tmp, ctx: (write("my bbc.yaml", CLS)(tmp, ctx), write("train.csv", "text,label\na,x\n")(tmp, ctx))),
    Case("task-words-are-the-tags", SWEEP, "word_column -1 and tag_column -1 are the same column",
         task_files(TOK + "word_column: -1\n", train_txt=CONLL)),
    Case("task-a-word-without-its-tag", SWEEP, "{tmp}/train.txt: line 2 has 1 column(s) ['Karenina']: word_column=0 "
         "and tag_column=-1 are both column 0", task_files(TOK, train_txt=CONLL.replace("Karenina I-PER", "Karenina"))),
    Case("task-conll-not-utf8", SWEEP, "{tmp}/train.txt:2: not UTF-8 text (invalid continuation byte: byte 0xe9",
         task_files(TOK, train_txt=b"Anna B-PER\nCaf\xe9 O\n\n")),
    Case("task-squad-not-utf8", SWEEP, "{tmp}/train.json:1: not UTF-8 text (invalid continuation byte: byte 0xe9 at "
         "column",
         task_files("family: qa\ntrain: train.json\nvalidation: train.json\n",
                    train_json=SQUAD.format().replace("Oslo", "Sm\xe9").encode("latin-1"))),
    Case("task-qrels-not-utf8", (*SWEEP, "--set", "retrieval.train_on=null"),
         "{tmp}/beir/qrels/test.tsv:2: not UTF-8 text", two(beir_files, write("beir/qrels/test.tsv",
                                                                             b"query-id\tcorpus-id\tscore\nq\xe9\td0\t1\n"))),
    Case("task-jsonl-lone-surrogate", (*SWEEP, "--set", "retrieval.train_on=null"),
         "{tmp}/beir/queries.jsonl:2: the escape \\udc00 is half of a UTF-16 surrogate pair",
         two(beir_files, write("beir/queries.jsonl", '{{"_id": "q0", "text": "film 0"}}\n'
                               '{{"_id": "q1", "text": "film \\udc00 1"}}\n{{"_id": "q2", "text": "film 2"}}\n'
                               '{{"_id": "q3", "text": "x"}}\n'))),
    Case("task-qrels-pair-judged-twice-differently", (*SWEEP, "--set", "retrieval.train_on=null"),
         "{tmp}/beir/qrels/test.tsv:4: query 'q1' and document 'd1' are judged 0 here and 1 on line 2: give each pair "
         "one score", two(beir_files, write("beir/qrels/test.tsv",
                                           "query-id\tcorpus-id\tscore\nq1\td1\t1\nq0\td0\t1\nq1\td1\t0\n"))),
    Case("task-beir-test-answer-in-train", SWEEP, "{tmp}/beir/qrels/test.tsv: 1 relevant (query, document) pairs of "
         "the test split are relevant in the train qrels too ({tmp}/beir/qrels/train.tsv): ('q4', 'd4')",
         two(beir_files, write("beir/qrels/train.tsv", "q0\td0\t1\nq4\td4\t1\n"))),
    Case("task-beir-train-qrels-only", (*SWEEP, "--set", "retrieval.train_on=null"), "{tmp}/beir: train qrels only; "
         "a retrieval task is scored on validation (dev.tsv) and test (test.tsv) qrels",
         two(beir_files, lambda tmp, ctx: [(tmp / f"beir/qrels/{s}.tsv").unlink() for s in ("dev", "test")])),
    Case("sweep-train-on-names-no-task", (*SWEEP, "--set", "retrieval.train_on=no-such-set"),
         "the protocol's retrieval.train_on ('no-such-set') trains every retrieval task of a sweep that has no train "
         "qrels of its own: unknown task 'no-such-set'",
         two(beir_files, lambda tmp, ctx: (tmp / "beir" / "qrels" / "train.tsv").unlink())),
    Case("task-given-twice", (*SWEEP[:3], "{tmp}/t.yaml", *SWEEP[3:]), "task '{tmp}/t.yaml' is given twice",
         task_files(CLS, train_csv=CSV)),
    Case("task-of-one-class", SWEEP, "task 't': every train example has the label 'pos'; a classification task needs "
         "at least two classes in train", task_files(CLS, train_csv=CSV.replace("neg", "pos"))),
    Case("task-qa-without-answers", SWEEP, "QA task 't': no question of the train split has an answer",
         task_files("family: qa\ntrain: train.json\nvalidation: train.json\ntest: train.json\n",
                    train_json=SQUAD.replace('"answers": [{{"text": "Anna", "answer_start": 0}}]',
                                             '"answers": [], "is_impossible": true'))),
    Case("task-ranking-of-one-document", (*SWEEP, "--set", "retrieval.train_on=null"), "retrieval task 't': its "
         "validation queries are ranked among 1 document", two(beir_files, write("beir/corpus.jsonl",
                                                                               '{{"_id": "d0", "text": "Oslo"}}\n'),
                                                                         write("beir/qrels/dev.tsv", "q0\td0\t1\n"),
                                                                         write("beir/qrels/test.tsv", "q1\td0\t1\n"),
                                                                         write("beir/qrels/train.tsv", "q2\td0\t1\n"))),
    Case("task-text-column-given-as-label", SWEEP, "not seen in train: ['dev 0 ",
         task_files(CLS.replace("validation: train.csv", "validation: dev.csv") + "label_column: text\n",
                    train_csv="text,label\n" + "".join(f"train {i} {'word ' * 2000},a\n" for i in range(40)),
                    dev_csv="text,label\n" + "".join(f"dev {i} {'word ' * 2000},a\n" for i in range(8)))),
    Case("task-text-column-given-as-label-listed-in-short", SWEEP, " and 3 more; train has ['train 0 word word",
         task_files(CLS.replace("validation: train.csv", "validation: dev.csv") + "label_column: text\n",
                    train_csv="text,label\n" + "".join(f"train {i} {'word ' * 2000},a\n" for i in range(40)),
                    dev_csv="text,label\n" + "".join(f"dev {i} {'word ' * 2000},a\n" for i in range(8)))),
    Case("task-beir-zero-shot-under-the-default-protocol", SWEEP, "the protocol's retrieval.train_on "
         "('wiki-description') trains every retrieval task of a sweep that has no train qrels of its own",
         two(beir_files, lambda tmp, ctx: (tmp / "beir" / "qrels" / "train.tsv").unlink())),
    Case("task-missing-folder", SWEEP, "task file {tmp}/t.yaml: folder: {tmp}/beir ('beir' read from the task file's "
         "folder, {tmp}) does not exist",
         task_files("family: retrieval\nfolder: beir\n")),
    Case("task-empty-label", SWEEP, "{tmp}/dev.csv: row 3 has an empty label (column 'label')",
         task_files(CLS.replace("validation: train.csv", "validation: dev.csv"), train_csv=CSV,
                    dev_csv="text,label\na,pos\nb,neg\nc,\n")),
    Case("task-missing-column", SWEEP, "{tmp}/train.csv: row 1 has no column 'sentiment'",
         task_files(CLS + "label_column: sentiment\n", train_csv=CSV)),
    Case("task-tag-not-in-scheme", SWEEP, "{tmp}/train.txt: line 8: tag 'B_person' is not valid under tag_scheme iob2",
         task_files(TOK + "tag_scheme: iob2\n", train_txt=CONLL + "Leo B_person\n")),
    Case("task-inside-without-begin", SWEEP, "{tmp}/train.txt: line 2: tag 'I-LOC' is not valid under tag_scheme iob2",
         task_files(TOK + "tag_scheme: iob2\n", train_txt="Anna O\nOslo I-LOC\n\n" + CONLL)),
    Case("task-bioes-unclosed", SWEEP, "{tmp}/train.txt: line 2: tag 'I-PER' is not valid under tag_scheme bioes",
         task_files(TOK + "tag_scheme: bioes\n", train_txt="Anna B-PER\nKarenina I-PER\n\nOslo S-LOC\n\n")),
    Case("task-tags-fit-no-scheme", SWEEP, "{tmp}/train.txt: line 8: tag 'B_person' fits none of iob1, iob2, bioes",
         task_files(TOK, train_txt=CONLL + "Leo B_person\n")),
    Case("task-key-twice", SWEEP, "{tmp}/t.yaml:4:1: not valid YAML: key 'train' is given twice in one mapping "
         "(first on line 2): keep one", task_files(CLS + "train: other.csv\n", train_csv=CSV)),
    Case("task-not-a-mapping", SWEEP, "{tmp}/t.yaml must hold a mapping", task_files("- family\n- tokens\n")),
    Case("task-unknown-spec", ("sweep", "{ckpt}", "no-such-task", "--out", "{tmp}/o"), "unknown task 'no-such-task'"),
    Case("task-offline-not-prepared", ("sweep", "{ckpt}", "wiki-topic", "--out", "{tmp}/o"),
         "task 'wiki-topic' is one of the offline suite's tasks, not prepared under "),
    Case("finetune-offline-not-prepared", ("finetune", "{ckpt}", "conll-cloze", "--lr", "1e-3", "--out", "{tmp}/o"),
         "prepare the suite with `encoderlab data prepare offline`"),
    Case("task-unknown-close-name", ("sweep", "{ckpt}", "wiki-topik", "--out", "{tmp}/o"),
         "unknown task 'wiki-topik' (did you mean 'wiki-topic'?); known: none offline"),
    Case("task-named-twice", ("sweep", "{ckpt}", "{tmp}/t.yaml", "{tmp}/u.yaml", "--out", "{tmp}/o"),
         "two tasks are named 'same'", lambda tmp, ctx: [task_files(CLS + "name: same\n", train_csv=CSV)(tmp, ctx),
                                                         write("u.yaml", CLS + "name: same\n")(tmp, ctx)]),
    # through config.validate: one line once its messages are ("task file X: key: problem")
    Case("task-unknown-key", SWEEP, "task file {tmp}/t.yaml: lable_column: unknown key",
         task_files(CLS + "lable_column: label\n", train_csv=CSV)),
    Case("task-typo-max-length", SWEEP, "task file {tmp}/t.yaml: max_lenght: unknown key",
         task_files(CLS + "max_lenght: 64\n", train_csv=CSV)),
    Case("task-unknown-scheme", SWEEP, "task file {tmp}/t.yaml: tag_scheme", task_files(TOK + "tag_scheme: bio\n",
                                                                                         train_txt=CONLL)),
    Case("task-name-leaves-folder", SWEEP, "task file {tmp}/t.yaml: name", task_files(CLS + "name: ../x\n",
                                                                                      train_csv=CSV)),
    Case("task-unknown-family", SWEEP, "task file {tmp}/t.yaml: family", task_files("family: ner\ntrain: a\n")),
    Case("task-missing-train", SWEEP, "task file {tmp}/t.yaml: train", task_files("family: qa\nvalidation: v\n")),
    # a max_length that holds no text: refused when the task is prepared, before any run (it used to be accepted)
    Case("task-override-max-length-below-the-special-tokens", (*SWEEP, "--set", "task_overrides.t.max_length=2"),
         "max_length=2 is too small for task 't': at least 3", task_files(CLS, train_csv=CSV)),
    Case("sweep-max-length-below-a-qa-window", (*SWEEP, "--set", "task_overrides.t.max_length=6"),
         "max_length=6 is too small for QA task 't': at least 7 (its special tokens, the question's first "
         "max_length // 2 tokens and a token of the context)",
         task_files("family: qa\ntrain: train.json\nvalidation: train.json\ntest: train.json\n", train_json=SQUAD)),
    Case("sweep-max-length-below-a-retrieval-text", (*SWEEP, "--set", "task_overrides.t.max_length=3", "--set",
                                                      "retrieval.train_on=null"),
         "max_length=3 is too small for task 't': at least", beir_files),
    Case("sweep-zero-lr", (*SWEEP, "--set", "lrs=[0]"), "--set lrs=[0]: lrs.0", task_files(CLS, train_csv=CSV)),
    Case("sweep-infinite-lr", (*SWEEP, "--set", "lrs=[.inf]"), "--set lrs=[.inf]: lrs.0: Input should be a finite "
         "number", task_files(CLS, train_csv=CSV)),
    Case("sweep-negative-lr", (*SWEEP, "--set", "lrs=[-1e-3]"), "--set lrs=[-1e-3]: lrs.0",
         task_files(CLS, train_csv=CSV)),
    Case("finetune-save-linear-head", (*FINETUNE_SAVE, "{tmp}/m"), "t: its fine-tuned model cannot be saved: "
         "classification_head: linear (mean pooling -> Linear) is no stock class's head; fine-tune with --set "
         "classification_head=dense_gelu", task_files(CLS, train_csv=CSV)),
    Case("finetune-save-over-other-files", (*FINETUNE_SAVE, "{tmp}/full"), "--save {tmp}/full exists and holds "
         "something other than a saved fine-tuned model", lambda tmp, ctx: (task_files(CLS, train_csv=CSV)(tmp, ctx),
                                                                          write("full/notes.txt", "mine")(tmp, ctx))),
    Case("sweep-save-models-unknown", (*SWEEP, "--save-models", "best"), "--save-models 'best': give one of none, "
         "chosen, all", task_files(CLS, train_csv=CSV)),
    Case("sweep-save-all-batched", (*SWEEP, "--save-models", "all", "--engine", "batched"), "--engine batched cannot "
         "save each run", task_files(CLS, train_csv=CSV)),
]

# ------------------------------------------------------------------------------------------ resume, data, checkpoints
def resumable(*damage: Callable[[Path], None], **changes) -> Callable[[Path, dict], None]:
    """A setup: a copy of the shared finished run in {tmp}/runs/run (each of `damage` applied to the copy's folder)
    and `run.yaml` continuing it with `changes`."""
    def setup(tmp: Path, ctx: dict) -> None:
        shutil.copytree(ctx["run"], tmp / "runs" / "run")
        for hurt in damage:
            hurt(tmp / "runs" / "run")
        run_config(**changes)(tmp, ctx)
    return setup


def latest_file(name: str, text: str | None = None) -> Callable[[Path], None]:
    """Damage a file of the run's last checkpoint: replace its text, or delete it (text None)."""
    def hurt(run: Path) -> None:
        path = run / "checkpoints" / (run / "LATEST").read_text().strip() / name
        path.unlink() if text is None else path.write_text(text)
    return hurt


def own_data(hurt: Callable[[Path], None]) -> Callable[[Path, dict], None]:
    """A setup: a copy of the packed dataset in {tmp}/packed, damaged by `hurt`, and run.yaml training on it."""
    def setup(tmp: Path, ctx: dict) -> None:
        shutil.copytree(ctx["packed"], tmp / "packed")
        hurt(tmp / "packed")
        run_config(data={"path": str(tmp / "packed")})(tmp, ctx)
    return setup


def cut_short(packed: Path) -> None:
    cut_file(packed / "train-00000.tokens.bin")


def cut_file(file: Path) -> None:
    with open(file, "r+b") as f:
        f.truncate(f.seek(0, 2) - 128)


def flip_bytes(packed: Path) -> None:
    with open(packed / "train-00000.docids.bin", "r+b") as f:
        f.seek(64)
        f.write(bytes(b ^ 0xFF for b in f.read(64)))
        f.seek(64)


def prepared(hurt: Callable[[Path], None]) -> Callable[[Path, dict], None]:
    """A setup: a small corpus prepared (as PREPARE's arguments say) into {tmp}/d, whose packed/ is then hurt."""
    def setup(tmp: Path, ctx: dict) -> None:
        from tests.conftest import synthetic_documents

        from encoderlab.data.prepare import PrepareOptions, prepare

        rows = (json.dumps({"text": d.text}) for d in synthetic_documents(60))
        (tmp / "docs.jsonl").write_text("\n".join(rows) + "\n")
        prepare(str(tmp / "docs.jsonl"), tmp / "d", PrepareOptions(vocab_size=300, seq_len=16, val_fraction=0.1),
                log=lambda message: None)
        hurt(tmp / "d" / "packed")
    return setup


PREPARE = ("data", "prepare", "{tmp}/docs.jsonl", "--out", "{tmp}/d", "--vocab-size", "300", "--seq-len", "16",
           "--val-fraction", "0.1")
RESUME = ("pretrain", "{tmp}/run.yaml", "--resume")
JOIN = ("data", "prepare", "{tmp}/src", "--out", "{tmp}/d", "--tokenizer", "{tmp}/tokenizer.json", "--join", "2")


def sharded(hurt: Callable[[Path], None]) -> Callable[[Path, dict], None]:
    """A setup: 2 files of text tokenised as shards 0/2 and 1/2 into {tmp}/d/parts, which is then hurt."""
    def setup(tmp: Path, ctx: dict) -> None:
        from tests.conftest import synthetic_documents

        from encoderlab.data.prepare import PrepareOptions, prepare
        from encoderlab.data.tokenizer import train_bpe

        docs = synthetic_documents(60)
        train_bpe((d.text for d in docs), 300).tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "src").mkdir()
        for i in range(2):
            (tmp / "src" / f"{i}.jsonl").write_text("".join(json.dumps({"text": d.text}) + "\n" for d in docs[i::2]))
        for i in range(2):
            prepare(str(tmp / "src"), tmp / "d", PrepareOptions(tokenizer=str(tmp / "tokenizer.json"), shard=(i, 2)),
                    log=lambda message: None)
        (tmp / "d" / ".lock").touch()  # as a join, which holds it, leaves it
        hurt(tmp / "d" / "parts")
    return setup


def config_lost(run: Path) -> None:
    (run / "config.yaml").unlink()


def state_without_config(run: Path) -> None:
    """The last checkpoint as written before checkpoints recorded their config (its checksums made to agree)."""
    ckpt = run / "checkpoints" / (run / "LATEST").read_text().strip()
    state = json.loads((ckpt / "state.json").read_text())
    del state["config"], state["format_version"]
    (ckpt / "state.json").write_text(json.dumps(state))
    sums = json.loads((ckpt / "checksums.json").read_text())
    sums["files"]["state.json"] = {"size": (ckpt / "state.json").stat().st_size,
                                   "sha256": hashlib.sha256((ckpt / "state.json").read_bytes()).hexdigest()}
    (ckpt / "checksums.json").write_text(json.dumps(sums))


def swap_tokenizer(packed: Path, vocab_size: int | None = None) -> None:
    """Another BPE (of the same vocabulary size unless given) in place of the data's tokenizer: its ids decode to
    other text."""
    from tests.conftest import synthetic_documents

    from encoderlab.data.tokenizer import train_bpe

    texts = [d.text[::-1] for d in synthetic_documents(100)]
    size = vocab_size or json.loads((packed / "meta.json").read_text())["tokenizer"]["vocab_size"]
    shutil.rmtree(packed / "tokenizer")
    train_bpe(texts, size).save(packed / "tokenizer")


def empty_tokenizer(packed: Path) -> None:
    (packed / "tokenizer" / "tokenizer.json").write_bytes(b"")


def unrecorded(hurt: Callable[[Path], None]) -> Callable[[Path], None]:
    """`hurt` applied to data packed before meta.json recorded the tokenizer's digests."""
    def damage(packed: Path) -> None:
        meta = json.loads((packed / "meta.json").read_text())
        del meta["tokenizer_files"], meta["format_version"]
        (packed / "meta.json").write_text(json.dumps({**meta, "format": 1}))  # format 1, data/migrate_packed.py
        hurt(packed)
    return damage


DRY_RUN = ("pretrain", "{tmp}/run.yaml", "--dry-run")
INSPECT = ("data", "inspect", "{tmp}/packed")
TOKENIZER_DIFFERS = "packed tokenizer {tmp}/packed/tokenizer/tokenizer.json differs from the one the data was packed"
RESUME_CASES = [
    Case("resume-config-lost-changed-lr", RESUME, "optim.lr: 0.0005 -> 0.001",
         resumable(config_lost, optim__lr=1e-3)),
    Case("resume-config-lost-changed-seed", RESUME, "train.seed: 0 -> 7", resumable(config_lost, train__seed=7)),
    Case("resume-config-lost-old-checkpoint", RESUME, "its config.yaml is missing and its checkpoint "
         "({tmp}/runs/run/checkpoints/step-0000002) was written before checkpoints recorded their config",
         resumable(config_lost, state_without_config, optim__lr=1e-3)),
    Case("pretrain-swapped-tokenizer", DRY_RUN, TOKENIZER_DIFFERS, own_data(swap_tokenizer)),
    Case("pretrain-empty-tokenizer", ("pretrain", "{tmp}/run.yaml"), TOKENIZER_DIFFERS, own_data(empty_tokenizer)),
    Case("pretrain-tokenizer-missing", DRY_RUN, "packed tokenizer {tmp}/packed/tokenizer/tokenizer.json is missing",
         own_data(lambda packed: (packed / "tokenizer" / "tokenizer.json").unlink())),
    Case("inspect-swapped-tokenizer", INSPECT, TOKENIZER_DIFFERS, own_data(swap_tokenizer)),
    Case("pretrain-unrecorded-empty-tokenizer", DRY_RUN, "packed tokenizer {tmp}/packed/tokenizer does not load",
         own_data(unrecorded(empty_tokenizer))),
    Case("pretrain-unrecorded-swapped-tokenizer", DRY_RUN, "{tmp}/packed/tokenizer is not the one the data was "
         "packed with: vocab_size", own_data(unrecorded(lambda packed: swap_tokenizer(packed, 300)))),
    Case("prepare-empty-tokenizer", PREPARE, "packed tokenizer {tmp}/d/packed/tokenizer/tokenizer.json differs",
         prepared(empty_tokenizer)),
    Case("resume-changed-seed", RESUME, "train.seed: 0 -> 1", resumable(train__seed=1)),
    Case("resume-changed-data-seed", RESUME, "data.seed: 0 -> 1", resumable(data__seed=1)),
    Case("resume-changed-objective", RESUME, "objective: 'mlm40' -> 'clm'", resumable(objective="clm")),
    Case("resume-changed-lr", RESUME, "optim.lr: 0.0005 -> 0.001", resumable(optim__lr=1e-3)),
    Case("resume-changed-decay", RESUME, "lr_schedule.decay_steps: 1 -> 2", resumable(lr_schedule__decay_steps=2)),
    Case("resume-changed-batch", RESUME, "train.global_batch: 2 -> 4", resumable(train__global_batch=4)),
    Case("resume-changed-dtype", RESUME, "train.dtype: 'fp32' -> 'bf16'", resumable(train__dtype="bf16")),
    Case("resume-changed-model", RESUME, "model.num_hidden_layers: 1 -> 2",
         resumable(model={"preset": "micro", "num_hidden_layers": 2})),
    Case("resume-more-steps-needs-extend", RESUME, "train.steps: 2 -> 4; to train it further, pass --extend",
         resumable(train__steps=4)),
    Case("extend-a-decayed-run", (*RESUME[:2], "--extend"), "at step 2 the run's LR was 0 x peak, this config "
         "gives 1 x peak, so it would not continue the same run; branch a new run from its stable checkpoint "
         "{tmp}/runs/run/checkpoints/step-0000001 with --set init.branch_from=", resumable(train__steps=4)),
    Case("extend-to-fewer-steps", (*RESUME[:2], "--extend"), "it is already planned for 2; --extend adds steps",
         resumable(train__steps=1)),
    Case("resume-no-run", RESUME, "nothing to continue in {tmp}/runs/run", run_config()),
    Case("extend-no-run", (*RESUME[:2], "--extend"), "nothing to continue in {tmp}/runs/run", run_config()),
    Case("pretrain-seed-beyond-64-bits", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", f"train.seed={2**64}"),
         "train.seed", run_config()),
    Case("pretrain-negative-data-seed", ("pretrain", "{tmp}/run.yaml", "--dry-run", "--set", "data.seed=-1"),
         "data.seed", run_config()),
    Case("resume-config-yaml-damaged", RESUME, "config.yaml is damaged",
         resumable(lambda run: (run / "config.yaml").write_text("train: [1, 2"))),
    Case("resume-state-json-invalid", RESUME, "state.json has 1 bytes", resumable(latest_file("state.json", "{"))),
    Case("resume-state-json-missing", RESUME, "which is missing or incomplete (no state.json)",
         resumable(latest_file("state.json"))),
    Case("resume-latest-is-a-folder", RESUME, "{tmp}/runs/run/LATEST is not a file",
         resumable(lambda run: ((run / "LATEST").unlink(), (run / "LATEST").mkdir()))),
    Case("resume-latest-binary", RESUME, "LATEST names '\\ufffd\\x00'",
         resumable(lambda run: (run / "LATEST").write_bytes(b"\xff\x00"))),
    Case("resume-checksums-missing", RESUME, "checksums.json is missing", resumable(latest_file("checksums.json"))),
    Case("pretrain-truncated-shard", DRY_RUN, "packed shard {tmp}/packed/train-00000.tokens.bin has",
         own_data(cut_short)),
    Case("pretrain-missing-shard", DRY_RUN, "packed shard {tmp}/packed/train-00000.docids.bin is missing",
         own_data(lambda packed: (packed / "train-00000.docids.bin").unlink())),
    Case("pretrain-meta-json-invalid", DRY_RUN, "{tmp}/packed/meta.json is not JSON",
         own_data(lambda packed: (packed / "meta.json").write_text("{"))),
    Case("pretrain-meta-json-without-splits", DRY_RUN, "meta.json is not a valid index of packed shards (no 'splits')",
         own_data(lambda packed: (packed / "meta.json").write_text('{"format": 1, "seq_len": 64, "dtype": "uint16", '
                                                                   '"tokenizer": {"vocab_size": 320}}'))),
    Case("pretrain-meta-json-empty", DRY_RUN, "{tmp}/packed/meta.json is empty: prepare the data again",
         own_data(lambda packed: (packed / "meta.json").write_text(""))),
    Case("pretrain-meta-json-a-folder", DRY_RUN, "{tmp}/packed/meta.json is a folder, not a file",
         own_data(lambda packed: ((packed / "meta.json").unlink(), (packed / "meta.json").mkdir()))),
    Case("report-plan-json-empty", ("study", "report", "{tmp}/s"), "{tmp}/s/plan.json is empty: run the study again",
         write("s/plan.json", "")),
    Case("report-plan-json-a-folder", ("study", "report", "{tmp}/s"), "{tmp}/s/plan.json is a folder, not a file",
         write("s/plan.json/x", "")),
    Case("report-plan-json-not-a-plan", ("study", "report", "{tmp}/s"), "{tmp}/s/plan.json is not a study's plan",
         write("s/plan.json", "[1]")),
    Case("pretrain-relative-data-path", (*DRY_RUN, "--set", "data.path=dpref/packed"),
         f"no packed dataset at {os.getcwd()}/dpref/packed ('dpref/packed' read from the current folder): create it "
         "with `encoderlab data prepare SRC --out dpref`", run_config()),
    Case("pretrain-relative-branch-from", (*DRY_RUN, "--set", "init.branch_from=nowhere/run"),
         f"{os.getcwd()}/nowhere/run ('nowhere/run' read from the current folder) is neither a checkpoint",
         run_config()),
    Case("pretrain-meta-json-missing", DRY_RUN, "no packed dataset at {tmp}/packed",
         own_data(lambda packed: (packed / "meta.json").unlink())),
    Case("pretrain-token-ids-beyond-vocab", (*DRY_RUN, "--set", "model.vocab_size=100"),
         "--set model.vocab_size=100: model.vocab_size: the data's token ids go up to", run_config()),
    Case("prepare-truncated-shard", PREPARE, "packed shard {tmp}/d/packed/train-00000.tokens.bin has",
         prepared(cut_short)),
    Case("prepare-damaged-shard", PREPARE, "train-00000.docids.bin does not match its SHA-256 in meta.json",
         prepared(flip_bytes)),
    Case("join-missing-shard", JOIN, "shard 1/2 is not complete ({tmp}/d/parts/shard-1-of-2.json is missing",
         sharded(lambda parts: (parts / "shard-1-of-2.json").unlink())),
    Case("join-truncated-part", JOIN, "part 0 of shard 0/2: {tmp}/d/parts/part-000000.documents.tsv has",
         sharded(lambda parts: cut_file(parts / "part-000000.documents.tsv"))),
]

# A part whose bytes changed but not its size is found while the join reads it (hashing 100B tokens twice would
# double the join's I/O): tests/integration/test_prepare_shards.py checks that refusal.

# ------------------------------------------------------------------------------------------ files, folders, paths
def read_only(folder: str, then: Callable[[Path, dict], None] | None = None) -> Callable[[Path, dict], None]:
    """A setup that makes `folder` (under the test's folder) read-only, after `then`; skips where that stops
    nothing: root (os.geteuid() == 0) writes into read-only folders."""
    def setup(tmp: Path, ctx: dict) -> None:
        if then:
            then(tmp, ctx)
        probe = tmp / ".probe"
        probe.mkdir(mode=0o555)
        stops = not os.access(probe, os.W_OK)
        probe.rmdir()
        if not stops:
            pytest.skip("running as root: read-only folders do not stop it")
        (tmp / folder).mkdir(exist_ok=True)
        (tmp / folder).chmod(0o555)
    return setup


def pretrain_into(out_dir: str, **changes) -> Callable[[Path, dict], None]:
    """`run_config` with out_dir `out_dir` under the test's folder."""
    def setup(tmp: Path, ctx: dict) -> None:
        run_config(**changes)(tmp, ctx)
        config = yaml.safe_load((tmp / "run.yaml").read_text())
        (tmp / "run.yaml").write_text(yaml.safe_dump({**config, "out_dir": str(tmp / out_dir)}))
    return setup


def crafted_latest(tmp: Path, ctx: dict) -> None:
    """A copy of the shared run's files but its checkpoints, whose LATEST points outside the run."""
    (tmp / "run" / "checkpoints").mkdir(parents=True)
    (tmp / "run" / "LATEST").write_text("../../../etc\n")


IO_CASES = [
    Case("sweep-out-read-only", ("sweep", "{ckpt}", "sst2", "--out", "{tmp}/ro/evals"),
         "--out {tmp}/ro/evals cannot be written: {tmp}/ro is not writable", read_only("ro")),
    Case("finetune-out-read-only", ("finetune", "{ckpt}", "sst2", "--lr", "1e-3", "--out", "{tmp}/ro"),
         "--out {tmp}/ro cannot be written: {tmp}/ro is not writable", read_only("ro")),
    Case("pretrain-out-dir-read-only", ("pretrain", "{tmp}/run.yaml"),
         "{tmp}/ro/runs/run cannot be written: {tmp}/ro is not writable", read_only("ro", pretrain_into("ro/runs"))),
    Case("prepare-out-read-only", ("data", "prepare", "{tmp}/docs.txt", "--out", "{tmp}/ro/data"),
         "--out {tmp}/ro/data cannot be written: {tmp}/ro is not writable",
         read_only("ro", write("docs.txt", "one document.\n\nanother one.\n"))),
    Case("export-out-read-only", ("export", "{ckpt}", "--out", "{tmp}/ro/hf"),
         "--out {tmp}/ro/hf cannot be written: {tmp}/ro is not writable", read_only("ro")),
    Case("export-replaces-out-in-read-only-folder", ("export", "{ckpt}", "--out", "{tmp}/ro/hf", "--force"),
         "--out {tmp}/ro/hf cannot be written: {tmp}/ro is not writable", read_only("ro", write("ro/hf/x", "x"))),
    Case("import-hf-out-read-only", ("import-hf", "{tmp}/model", "--out", "{tmp}/ro/ckpt"),
         "--out {tmp}/ro/ckpt cannot be written: {tmp}/ro is not writable",
         read_only("ro", write("model/config.json", '{{"model_type": "llama"}}'))),
    Case("prepare-out-a-run-folder", ("data", "prepare", "{tmp}/docs.txt", "--out", "{tmp}/run"),
         "--out {tmp}/run is a run folder (it holds checkpoints/): prepared data goes in a folder of its own",
         two(write("docs.txt", "a doc.\n"), write("run/checkpoints/x", "x"))),
    Case("prepare-out-inside-a-run", ("data", "prepare", "{tmp}/docs.txt", "--out", "{tmp}/run/checkpoints/d"),
         "--out {tmp}/run/checkpoints/d lies inside {tmp}/run, a run folder",
         two(write("docs.txt", "a doc.\n"), write("run/LATEST", "step-0000001"))),
    Case("prepare-out-a-symlink-loop", ("data", "prepare", "{tmp}/docs.txt", "--out", "{tmp}/a"),
         "--out {tmp}/a is a symbolic link that leads to no file or folder ({tmp}/b)",
         two(write("docs.txt", "a doc.\n"), lambda tmp, ctx: ((tmp / "a").symlink_to(tmp / "b"),
                                                             (tmp / "b").symlink_to(tmp / "a")))),
    Case("sweep-out-a-dangling-symlink", ("sweep", "{ckpt}", "sst2", "--out", "{tmp}/gone"),
         "--out {tmp}/gone is a symbolic link that leads to no file or folder",
         lambda tmp, ctx: (tmp / "gone").symlink_to(tmp / "nowhere")),
    Case("pretrain-name-parent", ("pretrain", "{tmp}/run.yaml"), "name: must be one folder name",
         run_config(name="../x")),
    Case("pretrain-name-slash", ("pretrain", "{tmp}/run.yaml", "--set", "name=a/b"), "must be one folder name",
         run_config()),
    Case("pretrain-name-absolute", ("pretrain", "{tmp}/run.yaml", "--dry-run"), "must be one folder name",
         run_config(name="/tmp/x")),
    Case("export-latest-crafted", ("export", "{tmp}/run", "--out", "{tmp}/hf"),
         "{tmp}/run/LATEST names '../../../etc', which is not a checkpoint of this run", crafted_latest),
    Case("pretrain-out-dir-is-a-file", ("pretrain", "{tmp}/run.yaml"), "{tmp}/afile is a file, not a folder",
         two(write("afile", "x"), pretrain_into("afile"))),
    Case("sweep-out-is-a-file", ("sweep", "{ckpt}", "sst2", "--out", "{tmp}/afile"),
         "--out {tmp}/afile: {tmp}/afile is a file, not a folder", write("afile", "x")),
    Case("prepare-out-under-a-file", ("data", "prepare", "{tmp}/docs.txt", "--out", "{tmp}/afile/data"),
         "--out {tmp}/afile/data: {tmp}/afile is a file", two(write("afile", "x"), write("docs.txt", "a doc.\n"))),
    Case("export-out-is-a-file", ("export", "{ckpt}", "--out", "{tmp}/afile"), "{tmp}/afile is a file",
         write("afile", "x")),
    Case("export-eval-folder-without-this-checkpoint", ("export", "{ckpt}", "--out", "{tmp}/hf", "--eval", "{tmp}/ev"),
         "/PROTOCOL/summary.json, as `encoderlab sweep CKPT TASKS --out {tmp}/ev` writes)", write("ev/x", "x")),
    Case("export-eval-of-other-weights", ("export", "{ckpt}", "--out", "{tmp}/hf", "--eval", "{tmp}/s.json"),
         "give the evaluation of these weights, or run `encoderlab sweep {ckpt} TASKS`",
         write("s.json", '{{"tasks": {{}}, "weights_sha256": "0"}}')),
    Case("export-kind-cannot-hold", ("export", "{ckpt}", "--out", "{tmp}/hf", "--as", "qwen3"),
         "--as qwen3 cannot hold this model's qk_norm=False: export it --as llama"),
    Case("study-checkpoint-missing", ("study", "plan", "{tmp}/study.yaml"),
         "study s: checkpoints.old: 'nowhere/ckpt' not found (looked for {tmp}/nowhere/ckpt); give a checkpoint folder",
         write("study.yaml", "name: s\ncheckpoints: {{old: nowhere/ckpt, new: '{ckpt}'}}\n"
                             "evaluation: {{protocol: p.yaml, tasks: [sst2]}}\n")),
    Case("study-checkpoint-not-a-model", ("study", "plan", "{tmp}/study.yaml"),
         "study s: checkpoints.old: 'notes' ({tmp}/notes) is not a model: give a checkpoint folder (with state.json)",
         two(write("notes/readme.txt", "x"), write("study.yaml", "name: s\ncheckpoints: {{old: notes}}\n"
                                                                 "evaluation: {{protocol: p.yaml, tasks: [sst2]}}\n"))),
    Case("study-task-unknown", ("study", "run", "{tmp}/study.yaml"), "study s: evaluation task 'no-such-task': "
         "unknown task 'no-such-task'", two(write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"), write(
             "study.yaml", "name: s\nout_dir: '{tmp}/studies'\ncheckpoints: {{a: '{ckpt}'}}\n"
                           "evaluation: {{protocol: p.yaml, tasks: [no-such-task]}}\n"))),
    Case("study-task-listed-twice", ("study", "run", "{tmp}/study.yaml"), "study s: task 'sst2' is listed twice for "
         "a; list each task once", two(write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"), write(
             "study.yaml", "name: s\nout_dir: '{tmp}/studies'\ncheckpoints: {{a: '{ckpt}'}}\n"
                           "evaluation: {{protocol: p.yaml, tasks: [sst2, sst2]}}\n"))),
    Case("study-plan-task-listed-twice", ("study", "plan", "{tmp}/study.yaml"), "study s: task 'sst2' is listed "
         "twice for a; list each task once", two(write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"), write(
             "study.yaml", "name: s\nout_dir: '{tmp}/studies'\ncheckpoints: {{a: '{ckpt}'}}\n"
                           "evaluation: {{protocol: p.yaml, tasks: [sst2, sst2]}}\n"))),
    Case("study-task-named-twice", ("study", "plan", "{tmp}/study.yaml"), "and '{tmp}/sub/../t.yaml' of a are both "
         "named 't', and a task's records are filed under its name", two(
             task_files(CLS, train_csv=CSV), write("sub/keep.txt", "x"),
             write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"),
             write("study.yaml", "name: s\nout_dir: '{tmp}/studies'\ncheckpoints: {{a: '{ckpt}'}}\n"
                                 "evaluation: {{protocol: p.yaml, tasks: [t.yaml, sub/../t.yaml]}}\n"))),
    Case("study-dry-run-task-unknown", ("study", "run", "{tmp}/study.yaml", "--dry-run"), "study s: evaluation task "
         "'no-such-task': unknown task 'no-such-task'", two(write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"),
                                                           write("study.yaml", "name: s\ncheckpoints: {{a: '{ckpt}'}}\n"
                                                                 "evaluation: {{protocol: p.yaml, tasks: "
                                                                 "[no-such-task]}}\n"))),
    Case("study-plan-versus-itself", ("study", "plan", "{tmp}/study.yaml"), "study s: comparisons.0.versus: 'a' and "
         "'a' name the same model, compared with itself; name two different models", two(
             write("p.yaml", "name: p\nlrs: [1.0e-3]\nseeds: [0]\n"),
             write("study.yaml", "name: s\ncheckpoints: {{a: '{ckpt}'}}\nevaluation: {{protocol: p.yaml, tasks: "
                                 "[sst2]}}\ncomparisons: [{{versus: [a, a]}}]\n"))),
    Case("study-models-without-pretrain", ("study", "plan", "{tmp}/study.yaml"),
         "pretrain and budget must be given: models train models from the base pretraining config",
         write("study.yaml", "name: s\nmodels: [{{sizes: [micro], objectives: [clm]}}]\ncheckpoints: {{a: '{ckpt}'}}\n"
                             "evaluation: {{protocol: p.yaml, tasks: [sst2]}}\n")),
    Case("export-attention-unknown", ("export", "{ckpt}", "--out", "{tmp}/hf", "--as", "llama", "--attention", "up"),
         "--attention 'up': choose bidirectional or causal"),
    Case("export-sentence-transformers-causal", ("export", "{ckpt}", "--out", "{tmp}/hf", "--as",
                                                 "sentence-transformers", "--attention", "causal"),
         "--attention causal: --as sentence-transformers is a bidirectional encoder; a causal export is --as llama"),
    Case("import-hf-out-under-a-file", ("import-hf", "{tmp}/model", "--out", "{tmp}/afile/ckpt"),
         "{tmp}/afile is a file", two(write("afile", "x"), write("model/config.json", '{{"model_type": "llama"}}'))),
    Case("export-force-over-a-run-folder", ("export", "{ckpt}", "--out", "{tmp}/r", "--force"),
         "--out {tmp}/r is a run folder (it holds checkpoints/): it is never replaced, even with --force",
         write("r/checkpoints/step-0000001/state.json", "{{}}")),
    Case("export-out-inside-its-checkpoint", ("export", "{ckpt}", "--out", "{ckpt}/hf", "--as", "llama"),
         "--out {ckpt}/hf lies inside {ckpt}, a checkpoint of the run"),
    Case("import-hf-out-inside-a-run-folder", ("import-hf", "{tmp}/model", "--out", "{tmp}/r/imported"),
         "--out {tmp}/r/imported lies inside {tmp}/r, a run folder (it holds checkpoints/)",
         two(two(write("model/config.json", '{{"model_type": "llama"}}'), write("model/tokenizer.json", "{{}}")),
             write("r/LATEST", "step-0000001"))),
    Case("export-force-over-a-checkpoint", ("export", "{ckpt}", "--out", "{tmp}/c", "--force"),
         "--out {tmp}/c is an encoderlab checkpoint (it holds model.safetensors and state.json): it is never replaced",
         two(write("c/model.safetensors", "x"), write("c/state.json", "{{}}"))),
    Case("import-hf-force-over-a-runs-checkpoint", ("import-hf", "{tmp}/model", "--out",
                                                    "{tmp}/r/checkpoints/step-0000001", "--force"),
         "--out {tmp}/r/checkpoints/step-0000001 is a checkpoint of the run {tmp}/r: it is never replaced",
         two(write("model/config.json", '{{"model_type": "llama"}}'), write("r/checkpoints/step-0000001/import.json",
             "{{}}"), write("r/checkpoints/step-0000001/model.safetensors", "x"),
             write("r/checkpoints/step-0000001/state.json", "{{}}"))),
    Case("export-force-over-prepared-data", ("export", "{ckpt}", "--out", "{tmp}/d", "--force"),
         "--out {tmp}/d is a prepared dataset (it holds packed/ or corpus/): runs read it (and resume from it), so it "
         "is never replaced, even with --force", write("d/packed/meta.json", "{{}}")),
    Case("import-hf-force-over-packed-shards", ("import-hf", "{tmp}/model", "--out", "{tmp}/d/packed", "--force"),
         "--out {tmp}/d/packed is a prepared dataset's packed shards (meta.json, *.tokens.bin)", two(
             write("model/config.json", '{{"model_type": "llama"}}'), two(write("d/packed/meta.json", "{{}}"),
                                                                           write("d/packed/train.tokens.bin", "x")))),
    Case("export-force-over-sharded-parts", ("export", "{ckpt}", "--out", "{tmp}/d", "--force"),
         "--out {tmp}/d is a sharded preparation (it holds parts/): `--join` packs its tokenised parts and `--shard` "
         "resumes from them, so it is never replaced, even with --force",
         two(write("d/parts/part-000000.json", "{{}}"), write("d/parts/shard-0-of-2.json", "{{}}"))),
    Case("import-hf-force-over-the-parts-folder", ("import-hf", "{tmp}/model", "--out", "{tmp}/d/parts", "--force"),
         "--out {tmp}/d/parts is a sharded preparation's parts (part-*, shard-*-of-*.json): `--join` packs them and "
         "`--shard` resumes from them, so it is never replaced, even with --force",
         two(write("model/config.json", '{{"model_type": "llama"}}'), write("d/parts/part-000003.tokens.bin", "x"))),
    Case("export-force-out-a-symlink", ("export", "{ckpt}", "--out", "{tmp}/hf", "--force"),
         "--out {tmp}/hf is a symbolic link (to {tmp}/real): give the folder it leads to",
         two(write("real/keep.txt", "x"), lambda tmp, ctx: (tmp / "hf").symlink_to(tmp / "real"))),
]

CASES = CLI_CASES + TASK_CASES + RESUME_CASES + IO_CASES


@pytest.fixture(scope="module")
def context(tmp_path_factory, packed_dir) -> dict:
    out = tmp_path_factory.mktemp("runs")
    cfg = validate(PretrainConfig, _micro_run(packed_dir, out), "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run()
    run = out / "run"
    return {"packed": packed_dir, "run": run, "ckpt": next((run / "checkpoints").glob("step-*"))}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder with its size and time; a lock file only by its presence (a refused writer takes the
    lock before it looks, and leaves its name there)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() and p.name != ".lock"
            else (-1, 0) for p in folder.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_in_one_line(case: Case, tmp_path, context, monkeypatch, capsys):
    ctx = {**context, "tmp": tmp_path}
    if case.setup:
        case.setup(tmp_path, ctx)
    if case.without:
        monkeypatch.setitem(sys.modules, case.without, None)  # `import` raises ImportError, as if not installed
    before, shared_before = snapshot(tmp_path), snapshot(context["run"])
    code, _, stderr = run_command(monkeypatch, capsys, *(a.format(**ctx) for a in case.args))
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert case.says.format(**ctx) in lines[0], stderr
    assert "Traceback" not in stderr
    assert snapshot(tmp_path) == before, "a refused command left or changed files"
    assert snapshot(context["run"]) == shared_before, "a refused command changed the shared run"
    assert os.access(tmp_path, os.W_OK)


def test_the_reliability_page_counts_these_cases():
    """docs/reliability.md said 192 cases (64, 52, 48, 30 by area) where this file held 234."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert f"`tests/integration/test_bad_inputs.py` ({len(CASES)} cases)" in text
    areas = {"command line and configs": CLI_CASES, "task files and sweeps": TASK_CASES,
             "resume, data and checkpoints": RESUME_CASES, "files, folders and paths": IO_CASES}
    for area, cases in areas.items():
        assert re.search(rf"^\| {re.escape(area)} \| {len(cases)} \|$", text, re.M), area
