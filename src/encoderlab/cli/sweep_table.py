"""The sweep's summary on the console: per family, every task's test score beside the family's baselines, the
difference from the strongest of them (named), and a warning for a model that learned nothing."""
from __future__ import annotations

from rich.table import Table

from encoderlab.cli.console import out


def render_sweep(s: dict) -> None:
    """A sweep's summary as one table per family, each score beside the family's baselines."""
    from encoderlab.tasks import baselines  # deferred, as every command's heavy imports are (torch)

    p = s["protocol"]
    out.print(f"[bold]{s['tag']}[/bold]: protocol {p['name']} ({p['max_steps']} steps max, batch {p['batch_size']}, "
              f"{len(p['lrs'])} LRs x {len(p['seeds'])} seeds, LR chosen on {p['selection_split']} "
              f"{'per seed' if p.get('lr_choice') == 'per_seed' else 'by the mean over seeds'})")
    families: dict[str, list] = {}
    missing = False  # a baseline cell reads "-": say why, once
    for name, t in s["tasks"].items():
        families.setdefault(t["family"], []).append((name, t))
    for family, rows in families.items():
        table = Table(title=family, title_justify="left")
        names = baselines.columns(family, [t for _, t in rows])
        for col in ("task", "metric", "test", "95% CI", "best LR", "validation",
                    *(baselines.LABELS[n] for n in names), "vs strongest baseline", "std seeds", "std LRs", "runs"):
            table.add_column(col, justify="left" if col in ("task", "metric", "vs strongest baseline") else "right")
        for name, t in rows:
            base = [baselines.cell(t, n) for n in names]
            missing |= "-" in base
            runs = f"{t['runs'] - t['failed']}/{t['runs']}"
            if "test" not in t:
                table.add_row(name, t["metric"], "-", "-", "-", "-", *base, "-", "-", "-", runs)
                continue
            table.add_row(name, t["metric"], f"{t['test']:.2f}", _ci(t), _lr(t), f"{t['validation']:.2f}",
                          *base, baselines.versus(t), _spread(t, "seeds"), _spread(t, "lrs"), runs)
        out.print(table)
    if missing:
        out.print(f"Baselines on test: {baselines.MISSING}.")
    for name, t in s["tasks"].items():
        if t.get("warning"):
            mark = f"{baselines.CONSTANT_MARK} " if baselines.marked(t) else ""  # as `versus` marks its table cell
            out.print(f"[yellow]{mark}{name}: {t['warning']}: its test score is not evidence that it learned the "
                      "task[/]")
    out.print(f"{s['runs_done_this_time']} runs this time in {s['seconds_this_time']}s; summary in "
              f"{s['summary_file']}, each run's record beside it")


def _ci(t: dict) -> str:
    from encoderlab.finetuning.aggregate import ci_text  # deferred, as every command's heavy imports are

    return ci_text(t)


def _spread(t: dict, over: str) -> str:
    from encoderlab.finetuning.aggregate import spread_text  # deferred, as every command's heavy imports are

    return spread_text(t, over)


def _lr(t: dict) -> str:
    """The kept LR, or each seed's where `lr_choice: per_seed` kept different ones (seed order)."""
    kept = [lr for _, lr in sorted((t.get("lr_by_seed") or {}).items())]
    return "/".join(f"{lr:g}" for lr in kept) if len(set(kept)) > 1 else f"{t['best_lr']:g}"
