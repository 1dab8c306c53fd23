"""Shared fixtures: a small packed dataset built from synthetic text, so tests need no download."""
from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from encoderlab.data.documents import Document
from encoderlab.data.packing import pack
from encoderlab.data.tokenizer import train_bpe

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # `make test` runs one worker per core: more threads would only contend

HOME_OWNER = "ENCODERLAB_TEST_HOME_OWNER"


def pytest_configure(config):
    """No test reads the user's $ENCODERLAB_HOME: the session gets an empty one of its own, so the suite passes or
    fails as it would on a fresh machine. The controller makes it before xdist starts its workers, which inherit it;
    a test that needs the offline suite builds it there (tests/integration/test_offline_suite.py)."""
    if os.environ.get(HOME_OWNER):
        return
    home = tempfile.mkdtemp(prefix="encoderlab-test-home-")
    os.environ["ENCODERLAB_HOME"], os.environ[HOME_OWNER] = home, str(os.getpid())


def pytest_unconfigure(config):
    if os.environ.get(HOME_OWNER) == str(os.getpid()):
        shutil.rmtree(os.environ["ENCODERLAB_HOME"], ignore_errors=True)

WORDS = ("the cat sat on a mat while dogs ran across green fields and birds sang in tall trees near the old "
         "river where children played with boats made of paper").split()


def tiny_checkpoint(folder: Path, seed: int = 5) -> Path:
    """A weights-only checkpoint of a tiny random encoderlab model (2 layers, 32 wide, fp32) with a 300-token BPE of
    WORDS, as an MLM run's final checkpoint would be recorded."""
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM
    from encoderlab.runs.checkpoint import save_weights_only

    tok = train_bpe([" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(200)], 300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                      mask_token_id=tok.mask_id)
    model = TransformerLM(cfg)
    model.init_weights(seed=seed)
    return save_weights_only(folder, model.state_dict(), cfg, tok,
                             {"step": 3, "reason": "final", "objective": "mlm40", "total_steps": 3})


def synthetic_documents(n: int, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + "."
                     for _ in range(rng.randint(1, 6))]
        docs.append(Document(f"doc-{i}", "synthetic", " ".join(sentences).capitalize()))
    return docs


TINY_MODEL = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1}


def train_tiny(out: Path, packed: Path, name: str = "tiny") -> Path:
    """A 2-step pretraining of TINY_MODEL on `packed` into `out/name` (fp32): a real checkpoint for evaluation tests."""
    from encoderlab.core.config import validate
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    cfg = validate(PretrainConfig, {
        "name": name, "out_dir": str(out), "data": {"path": str(packed)}, "model": TINY_MODEL,
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "eval_batches": 1, "tensorboard": False}}, "test")
    Trainer(cfg, show_progress=False, log=lambda m: None).run()
    return out / name


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices: with 2 threads on a busy machine a step can take 100x longer (OpenMP contention)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `build(folder)` once per test session: under xdist the workers share it (a lock
    and a folder beside their own temporary folders), so the first worker to need it builds it and the others wait
    and read it. A folder whose build did not finish (no `name.complete` beside it) is emptied and built again."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out, complete = shared / name, shared / f"{name}.complete"
    with FileLock(str(shared / f"{name}.lock")):
        if not complete.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            complete.touch()
    return out


def run_command(monkeypatch, capsys, *args, home: Path | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the `encoderlab` command's own `main()` with these arguments, run in this
    process as the console script runs it once Python has started (ENCODERLAB_HOME=home where given; a 1000-column
    console, so that an error is one line however long). A fresh process spends ~5 s importing torch before it reads
    its arguments: tests of what a command prints, saves or refuses run it here; tests/integration/test_cli.py
    starts the real process."""
    from encoderlab.cli import main

    monkeypatch.setattr("sys.argv", ["encoderlab", *map(str, args)])
    if home is not None:
        monkeypatch.setenv("ENCODERLAB_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "1000")
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exc:  # typer ends every command this way, 0 included
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_classification_task(folder: Path) -> Path:
    """A tiny task file in `folder` ('good'/'bad' films, 8 rows a split): for tests that need some task, not scores."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        rows = [{"text": f"the film was {word}", "label": word} for word in ("good", "bad") * 4]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "task.yaml").write_text("family: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\n"
                                      "test: test.jsonl\ntext_column: text\nlabel_column: label\n")
    return folder / "task.yaml"


@pytest.fixture(scope="session")
def classification_task():
    """`classification_task(folder)` -> the path of a tiny task file written there."""
    return write_classification_task


@pytest.fixture(scope="session")
def synthetic():
    """`synthetic(n, seed=0)` -> n reproducible Documents of short English-like sentences."""
    return synthetic_documents


@pytest.fixture(scope="session")
def packed_dir(tmp_path_factory) -> Path:
    """~400 documents, vocabulary 320, windows of 64 tokens, 5% held out."""
    docs = synthetic_documents(400)
    tok = train_bpe((d.text for d in docs), 320)
    out = tmp_path_factory.mktemp("data") / "packed"
    pack(docs, tok, out, seq_len=64, val_fraction=0.05)
    return out
