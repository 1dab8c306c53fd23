"""Export a checkpoint of a continued transformers model (pretraining/continued.py) as what came in: its own
`*ForMaskedLM` class (`--as masked-lm`, the default), the body alone (`--as model`, what `AutoModel` loads) or a
mean-pooled sentence-transformers folder of that body (`--as sentence-transformers`), with the tokenizer the run's data
was packed with and a model card. The weights are the checkpoint's, written by transformers' own `save_pretrained`:
a checkpoint of a model not trained further writes back the weights it came with."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from encoderlab.core.errors import EncoderlabError, option
from encoderlab.core.io import atomic_dir
from encoderlab.core.quiet import quiet_transformers
from encoderlab.data.tokenizer import load_tokenizer
from encoderlab.hub import sentence
from encoderlab.hub.card import evaluation_lines, evaluation_summaries, model_index, public, training_info
from encoderlab.hub.folders import prepare_out
from encoderlab.model.transformers_body import TransformersConfig
from encoderlab.runs import checkpoint as ckpt
from encoderlab.runs.encoders import continued_config, masked_lm, usable_positions

KINDS = ("masked-lm", "model", sentence.KIND)


def export_continued(path: Path, out: Path, kind: str | None, *, evaluation: Path | None = None,
                     force: bool = False, log: Callable[[str], None] = lambda message: None) -> dict:
    kind = kind or "masked-lm"
    if kind not in KINDS:
        raise EncoderlabError(f"{option('as', kind, quote=True)}: {path} is a continued transformers model; it "
                              "exports as masked-lm (its own *ForMaskedLM class), model (the body, AutoModel) or "
                              "sentence-transformers")
    started = time.perf_counter()
    cfg = continued_config(path)
    model = masked_lm(path)
    out_model = model.base_model if kind != "masked-lm" else model
    tok = load_tokenizer(path / "tokenizer")
    info = training_info(path, ckpt.load_state(path))
    prepare_out(out, force, keep=path)
    evaluations = evaluation_summaries(path, evaluation, log)  # of these weights only, as for encoderlab's own
    with atomic_dir(out) as tmp:
        with quiet_transformers():
            out_model.save_pretrained(str(tmp))
        # RoBERTa's first positions are its padding's; the tokenizer's origin is published without local paths
        tok.save(tmp, model_max_length=usable_positions(cfg), origin=public(tok.origin))
        card = _card(kind, type(out_model).__name__, cfg, info, out.name, evaluations)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        if kind == sentence.KIND:
            sentence.write_modules(tmp, cfg, max_seq_length=usable_positions(cfg))
    log(f"exported {path} as {type(out_model).__name__} -> {out}")
    return {"export": str(out), "checkpoint": str(path), "as": kind, "class": type(out_model).__name__,
            "attention": "bidirectional", "parameters": sum(p.numel() for p in out_model.parameters()),
            "tokenizer_framing": "the run's data", "note": None, "training": info,
            "evaluations": [e["path"] for e in evaluations],
            "seconds": round(time.perf_counter() - started, 1)}


def _card(kind: str, cls: str, cfg: TransformersConfig, info: dict, name: str, evaluations: list[dict]) -> str:
    """The README.md: the Hub's metadata (the scores in its model-index), what the model is, and its evaluations
    beside their baselines. encoderlab does not know the source's license: `unknown`, to be set before publishing."""
    tokens = f"{info['tokens_seen']:,}" if info.get("tokens_seen") is not None else "an unknown number of"
    library, task = ((sentence.KIND, "sentence-similarity") if kind == sentence.KIND else
                     ("transformers", "fill-mask" if kind == "masked-lm" else "feature-extraction"))
    meta = {"library_name": library, "pipeline_tag": task, "tags": ["encoderlab", cfg.model_type],
            "license": info.get("license") or "unknown"}
    if index := model_index(name, evaluations):
        meta["model-index"] = index
    return public("\n".join([
        "---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(), "---", "", f"# {name}", "",
        f"A {cfg.model_type} model ({cls}) continued by encoderlab's pretraining: step {info.get('step')}, "
        f"objective {info.get('objective')}, {tokens} tokens.", "",
        "License: not recorded by encoderlab (`unknown` above): the weights carry the terms of the model they were "
        "continued from and of their training data; set `license` before publishing.", "",
        "## Evaluation", "", *evaluation_lines(evaluations), ""]))
