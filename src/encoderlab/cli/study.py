"""`encoderlab study plan | run | report`: a study file to a run graph, its execution, and its report."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from encoderlab.cli.console import STUDY_KEPT, emit, interrupt_said, log, out

study_app = typer.Typer(help="Plan, run and report a whole study (configs/studies/).", no_args_is_help=True)


def _flops(x: float) -> str:
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if x >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} FLOP"


def render_plan(s: dict) -> None:
    table = Table(title=f"study {s['study']}: pretraining runs (in order)", title_justify="left")
    for col in ("run", "objective", "steps", "starts from", "trains", "FLOPs", "checkpoints kept for others"):
        table.add_column(col, justify="right" if col in ("steps", "trains", "FLOPs") else "left")
    for r in s["runs"]:
        table.add_row(r["name"], r["objective"], f"{r['steps']:,}", r["from"], f"{r['trains']:,}",
                      _flops(r["flops"]), ", ".join(map(str, r["checkpoints"])) or "-")
    for i in s.get("imports", []):
        out.print(f"[bold]import[/bold]      {i['name']} ({i['source']}) -> {i['checkpoint']}, text packed with its "
                  f"tokenizer into windows of {i['seq_len']} -> {i['data']}: "
                  + ("done" if i["done"] else "the first thing `study run` does (until then, the shapes planned with "
                                         "come from the study's shape or the source's config.json)"))
    if s["runs"]:  # a study of existing models only says so below, in one line, not with an empty table
        out.print(table)
    kinds = [e["kind"] for e in s["evaluations"]]
    imported = f", {kinds.count('imported')} imported" if "imported" in kinds else ""
    imported += f", {kinds.count('checkpoint')} existing" if "checkpoint" in kinds else ""
    out.print(f"[bold]evaluation[/bold] {len(s['evaluations'])} checkpoints ({kinds.count('final')} models, "
              f"{kinds.count('intermediate')} intermediate, {kinds.count('random')} random-init{imported}) -> "
              f"{s['finetuning_runs']:,} fine-tuning runs" + (
                  f" ({s['finetuning_runs'] - s['baseline_finetuning_runs']:,} without the random-init baseline)"
                  if s["baseline_finetuning_runs"] else ""))
    if "mteb" in s:
        out.print(f"[bold]MTEB[/bold] {s['mteb']['models']} models x {len(s['mteb']['tasks'])} tasks "
                  f"({', '.join(s['mteb']['tasks'])}), frozen embeddings (docs/mteb.md)")
    if not s["runs"]:
        out.print("[bold]pretraining[/bold] none: the study evaluates existing models only")
    else:
        out.print(f"[bold]pretraining[/bold] {s['steps']:,} steps, {s['tokens']:,} tokens, {_flops(s['flops'])}; "
                  f"trained independently: {s['naive_steps']:,} steps, {_flops(s['naive_flops'])} "
                  f"(trunk sharing saves {100 * s['saving']:.1f}% of the FLOPs)")
    if "gpu" in s:
        g = s["gpu"]
        out.print(f"[bold]estimate[/bold]    {g['gpu_hours']:,.0f} GPU-hours on {g['name']} at {100 * g['mfu']:.0f}% "
                  f"MFU ({g['peak_tflops']:g} TFLOP/s bf16 peak), vs {g['naive_gpu_hours']:,.0f} trained "
                  "independently; fine-tuning not included")
    _render_data(out, s["data"], "data       ")
    for size, d in s.get("size_data", {}).items():  # a size of its own data (size_overrides' data.path)
        _render_data(out, d, f"data {size}", runs=f"{size}'s longest run")
    out.print(f"[bold]folder[/bold]      {s['folder']}")


def _render_data(out, d: dict, label: str, runs: str = "the longest run") -> None:
    if d["from"] == "prepared":
        budget = f" (budget {d['max_tokens']:,})" if d.get("max_tokens") else ""
        out.print(f"[bold]{label}[/bold] prepared {d['path']}: {d['train_tokens']:,} train tokens{budget}, "
                  f"vocabulary {d['vocab_size']:,}, windows of {d['seq_len']}; {runs} reads "
                  f"{d['longest_run_tokens']:,} tokens = {d['epochs']:g} epochs")
    elif d["from"] == "data_shape":
        out.print(f"[bold]{label}[/bold] {d['path']} is not prepared: planned with the study's data_shape "
                  f"(vocabulary {d['vocab_size']:,}, windows of {d['seq_len']})")


@study_app.command("plan")
def plan_cmd(
    study: Path = typer.Argument(..., help="A study file (configs/studies/*.yaml)."),
    gpu: str | None = typer.Option(None, help="Estimate GPU-hours on this GPU (h100, h200, a100, mi250x, ...)."),
    mfu: float | None = typer.Option(None, help="Model FLOPs utilisation assumed for the GPU-hours estimate "
                                                "(with --gpu; default 0.4)."),
    write_configs: bool = typer.Option(False, help="Also write STUDY/configs/ (each run's YAML and jobs.tsv) for a "
                                                   "cluster scheduler."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
) -> None:
    """Expand a study into its run graph: shared trunks, branches, steps, tokens, FLOPs against independent runs."""
    from encoderlab.core.errors import EncoderlabError
    from encoderlab.study.jobs import jobs_of
    from encoderlab.study.plan import build_plan
    from encoderlab.study.runner import check_runnable
    from encoderlab.study.runner import write_configs as write
    from encoderlab.study.spec import load_study

    if mfu is not None and gpu is None:  # it would be read by nothing: no estimate is made without a GPU
        raise EncoderlabError(f"--mfu {mfu:g} is the GPU-hours estimate's utilisation: give --gpu too (--gpu h100)")
    mfu = 0.4 if mfu is None else mfu
    if not 0 < mfu <= 1:
        raise EncoderlabError(f"--mfu {mfu:g}: give a fraction of the GPU's peak, above 0 and at most 1 (0.4 is 40%)")
    spec, base = load_study(study)
    plan = build_plan(spec, base)
    check_runnable(plan, planning=True)  # what `study run` refuses, `study plan` refuses too
    summary = plan.summary(gpu, mfu)
    if write_configs:
        write(plan, jobs_of(plan))
        log(f"wrote {plan.root / 'configs'} (jobs.tsv and one YAML per pretraining run)")
    emit(summary, as_json, render_plan)


@study_app.command("run")
def run_cmd(
    study: Path = typer.Argument(..., help="A study file (configs/studies/*.yaml)."),
    workers: int = typer.Option(1, help="Jobs run at once, each in its own process (CPU: cores are shared out; "
                                        "GPU: one per device)."),
    only: str | None = typer.Option(None, help="'pretrain': stop before evaluation."),
    job: str | None = typer.Option(None, help="Run this job alone (an id from STUDY/configs/jobs.tsv), e.g. one "
                                              "Slurm job per study job."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, run nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON on stdout."),
) -> None:
    """Run a study's pretraining and evaluation jobs in dependency order; resumable, a failure skips dependents."""
    from encoderlab.core.errors import EncoderlabError
    from encoderlab.study.plan import build_plan
    from encoderlab.study.jobs import jobs_of
    from encoderlab.study.runner import check_runnable, check_succeeded, refuse_changed, run_study
    from encoderlab.study.spec import load_study

    if only not in (None, "pretrain"):
        raise EncoderlabError(f"--only {only!r}: the allowed value is 'pretrain'")
    if workers < 1:
        raise EncoderlabError(f"--workers {workers}: give 1 or more")
    spec, base = load_study(study)
    plan = build_plan(spec, base)
    if dry_run:
        check_runnable(plan, only, job)
        refuse_changed(plan, jobs_of(plan))
        render_plan(plan.summary())
        return
    with interrupt_said(STUDY_KEPT.format(plan.root, "")):
        result = run_study(plan, base, workers=workers, log=log, only=only, job_id=job)

    def render(result: dict) -> None:
        out.print(f"[bold]study {spec.name}[/bold]: {result['done']}/{result['jobs']} jobs done "
                  f"({result['done_now']} this time, {result['seconds']}s)")
        for job, reason in result["failed"].items():
            out.print(f"[red]failed[/red] {job}: {reason.splitlines()[0]}")
        for job in result["skipped"]:
            out.print(f"[yellow]skipped[/yellow] {job}: it depends on a failed job")
        out.print(f"next: encoderlab study report {plan.root}")

    emit(result, as_json, render)
    check_succeeded(result, spec.name)


@study_app.command("report")
def report_cmd(
    folder: Path = typer.Argument(..., help="A study folder (what `study run` printed, e.g. studies/demo)."),
    metric: str = typer.Option("score", help="score: the protocol's metric; standard: the field's standard one."),
    reference: Path | None = typer.Option(None, help="The paper authors' results/ folder (EncodEval): their runs "
                                          "aggregated by their own rule (each seed's best LR), "
                                          "beside our models of the same names."),
    reference_model: list[str] = typer.Option([], help="With --reference: an authors' model to show, MODEL or "
                                              "OURS=MODEL (beside our evaluation OURS); repeatable."),
) -> None:
    """Write report.md with the paper's tables (CSV) and figures (PNG) from a study folder's records."""
    from encoderlab.study.report import write_report
    from encoderlab.study.results import unfinished_jobs

    path = write_report(folder, metric, reference, tuple(reference_model))
    out.print(f"[bold]report[/bold] {path}")
    if unfinished := unfinished_jobs(Path(folder) / "status"):  # the report opens with them; said here too
        failed = sum(j["status"] != "skipped" for j in unfinished)
        log(f"the study is not complete: {failed} job(s) failed and {len(unfinished) - failed} were skipped in "
             f"its last `study run` (listed at the top of the report)")
