"""`report.md` with CSV tables and PNG figures from a study folder: the paper's tables and figures for our runs."""
from __future__ import annotations

import textwrap
from pathlib import Path

from encoderlab.core.io import atomic_dir
from encoderlab.finetuning.aggregate import ONE, ZERO_VARIANCE
from encoderlab.study.compare import dataset_runs, deviations, pooled_sd
from encoderlab.study.results import (
    CategoryScore,
    StudyResults,
    category_scores,
)
from encoderlab.study.sanity import sanity_section
from encoderlab.study.standing import category_cell as _category_cell
from encoderlab.study.standing import dataset_constant_note, standing_notes
from encoderlab.study.tables import _csv, _fmt, _table
from encoderlab.tasks import baselines, registry


class Report:
    def __init__(self, root: Path, metric: str = "score", reference: Path | None = None,
                 reference_models: tuple[str, ...] = ()) -> None:
        """`metric`: the scores every table shows, "score" (the protocol's metric) or "standard" (the field's).
        `reference`: the authors' results/ folder, whose runs `reference_section` aggregates like ours;
        `reference_models`: which of its models, each `MODEL` or `OURS=MODEL` (default: every evaluation label
        that names a model folder there). `out` is where the tables and figures go: `write_report` sets it to
        the new report's folder before it replaces the old one."""
        self.res = StudyResults(root, metric)
        self.reference, self.reference_models = reference, reference_models
        self.out = Path(root) / "report"
        self.out.mkdir(parents=True, exist_ok=True)
        published = self.res.plan.get("paper_results") or {}
        self.paper = published.get("categories", {})
        self.paper_column = published.get("column", "paper")
        self.sections: list[str] = []

    def basis(self) -> str:
        """What every score of the report is: which metric, and how the LR was chosen."""
        if self.res.metric == "score":
            what = "the protocol's metric (`score`: the metric named in each per-dataset column)"
        else:
            standard = sorted({f.standard_metric for f in registry.families()})
            what = (f"the field's standard metric (`standard`: {', '.join(standard)}; `--metric score` shows the "
                    "protocol's)")
        how = {"per_seed": "each seed's run at its own best-validation LR, mean over seeds",
               "mean_over_seeds": "every seed's run at the one LR with the best mean validation score over seeds "
                                  "(among the LRs run on every seed), mean over seeds"}[self.res.lr_choice]
        return f"Scores: {what}; {how} (`lr_choice: {self.res.lr_choice}`)."

    # ------------------------------------------------------------------------------------------- tables

    def category_table(self, labels: list[str], name: str, title: str, row_name=lambda x: x) -> str:
        cats = [c for c in registry.categories() if any(c in self.res.categories.get(lb, {}) for lb in labels)]
        header = ["model"] + cats + ([f"{self.paper_column}: " + "/".join(cats)] if self.paper else [])
        rows, csv_rows = [], []
        for lb in labels:
            scores = self.res.categories.get(lb, {})
            row = [row_name(lb)] + [_category_cell(scores[c]) if c in scores else "-" for c in cats]
            if self.paper:
                pub = self.paper.get(lb, {})
                row.append(" / ".join(f"{pub[c]:.2f}" if c in pub else "-" for c in cats))
            rows.append(row)
            csv_rows.append([lb] + [round(scores[c].mean, 3) if c in scores else "" for c in cats])
        _csv(self.out / f"{name}.csv", ["model"] + cats, csv_rows)
        published = f" `{self.paper_column}`: the published means, the authors' metric." if self.paper else ""
        notes = standing_notes({lb: self.res.categories.get(lb, {}) for lb in labels}, cats)
        return (f"### {title}\n\n{_table(header, rows)}\n\n{notes}{self.basis()}{published} 95% intervals: "
                f"datasets as independent estimates (docs/evaluation.md, Intervals). CSV: `{name}.csv`\n")

    def dataset_tables(self, labels: list[str]) -> str:
        tasks = self.res.task_names()
        parts, csv_rows, missing, per_model, flagged = [], [], False, False, []
        for cat in registry.categories():
            names = [t for t in tasks if any(t in self.res.tasks[lb] and self.res.tasks[lb][t].category == cat
                                             for lb in labels)]
            if not names:
                continue
            rows = []
            for lb in labels:
                ts = self.res.tasks.get(lb, {})
                if not any(t in ts for t in names):
                    continue
                rows.append([lb] + [_score_cell(ts[t]) if t in ts and ts[t].test is not None else "-" for t in names])
                csv_rows += [_csv_row(lb, ts[t]) for t in names if t in ts]
                flagged += [f"{lb} / {t}: {ts[t].mostly_constant}" for t in names
                            if t in ts and baselines.marked(ts[t].summary or {})]  # the cells `versus` marks
            first = {t: next(self.res.tasks[lb][t] for lb in labels if t in self.res.tasks[lb]) for t in names}
            entries = [s.summary or {} for s in first.values()]
            for b in baselines.columns(entries[0].get("family", ""), entries):
                rows.append([f"*baseline: {baselines.LABELS[b]}*"] + [self._baseline_cell(labels, t, b) for t in names])
            metric = {t: first[t].metric for t in names}
            cells = [cell for row in rows if str(row[0]).startswith("*baseline") for cell in row[1:]]
            missing = missing or "-" in cells
            per_model = per_model or any(_per_model_dash(cell) for cell in cells)
            parts.append(f"#### {cat}\n\n" + _table(["model"] + [f"{t} ({metric[t]})" for t in names], rows))
        _csv(self.out / "datasets.csv", ["model", "task", "test", "ci95", "best_lr", "std_seeds", "std_lrs",
                                         "baseline", "failed_runs", "strongest_baseline", "strongest_baseline_value",
                                         "vs_strongest_baseline", "constant_predictions"], csv_rows)
        note = f" Baselines on test: {baselines.MISSING}." if missing or per_model else ""
        note += f" {PER_MODEL_DASH}" if per_model else ""
        note += dataset_constant_note(flagged)
        return "\n\n".join(parts) + f"\n\nTest score ± 95% CI over seeds, the LR kept and the difference from " \
            "the task's strongest baseline in brackets (which one is named; the family's baselines are the rows in " \
            "italics); a model whose every kept run predicts one thing on test is said to predict a constant, its " \
            f"score no evidence of learning.{note} {self.basis()} CSV: " \
            "`datasets.csv` (`baseline`: the trivial one)\n"

    def _baseline_cell(self, labels: list[str], task: str, baseline: str) -> str:
        """One baseline on one dataset; where it differs between the models (it reads the text each model's tokenizer
        keeps within max_length), each value with the models it is for."""
        models: dict[str, list[str]] = {}
        for lb in labels:
            if (score := self.res.tasks.get(lb, {}).get(task)) is not None:
                models.setdefault(baselines.cell(score.summary or {}, baseline), []).append(lb)
        if len(models) == 1:
            return next(iter(models))
        return "; ".join(f"{value} ({', '.join(lbs)})" for value, lbs in models.items())

    def sanity_section(self) -> str:
        """Every pretrained final model against the random-init baseline of its size (study/sanity.py)."""
        return sanity_section(self)

    # ------------------------------------------------------------------------------------------- figures

    def _plt(self):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt

    def efficiency_series(self) -> dict[str, dict[str, list[tuple[int, str]]]]:
        """Per full-budget model with intermediates, its lines as (global step, evaluation label): the model through
        its checkpoints, and each CPT arm from the model's final state on, at its source's steps plus its own."""
        res = self.res
        models = sorted({e["model"] for e in res.evaluations.values() if e["kind"] == "intermediate"})
        out = {}
        for model in models:
            lines = {model: sorted((e["step"], lb) for lb, e in res.evaluations.items()
                                   if e["model"] == model and e["kind"] in ("intermediate", "final"))}
            for r in res.runs.values():
                if r.get("init") == model and r["name"] in res.evaluations and model in res.evaluations:
                    lines[r["name"]] = [(res.runs[model]["steps"], model),
                                        (res.start_step(r["name"]) + r["steps"], r["name"])]
            out[model] = lines
        return out

    def efficiency_points(self, cat: str) -> dict[str, list[tuple[int, str, CategoryScore]]]:
        """Line -> (global step, label, score) in one category, each group of lines on the datasets evaluated at
        every one of its points (finals may have more tasks than intermediates)."""
        out = {}
        for lines in self.efficiency_series().values():
            common = set.intersection(*(set(self.res.tasks.get(lb, {})) for pts in lines.values() for _, lb in pts))
            for name, pts in lines.items():
                scores = [(step, lb, category_scores({t: s for t, s in self.res.tasks[lb].items() if t in common})
                           .get(cat)) for step, lb in pts]
                if any(c for *_, c in scores):
                    out[name] = [(step, lb, c) for step, lb, c in scores if c is not None]
        return out

    def random_reference(self, cat: str) -> dict[str, CategoryScore]:
        """Random-init baselines in one category on the datasets every intermediate checkpoint was scored on: the
        level a curve must clear before pretraining has taught anything these tasks can use."""
        inter = [lb for lb, e in self.res.evaluations.items() if e["kind"] == "intermediate"]
        common = set.intersection(*(set(self.res.tasks.get(lb, {})) for lb in inter)) if inter else set()
        out = {}
        for lb, e in self.res.evaluations.items():
            tasks = {t: s for t, s in self.res.tasks.get(lb, {}).items() if t in common}
            if e["kind"] == "random" and (score := category_scores(tasks).get(cat)):
                out[lb] = score
        return out

    def efficiency_figure(self) -> tuple[str | None, str]:
        """Score vs global pretraining step per category; the caption's warning where intervals dwarf differences."""
        full = self.efficiency_series()
        if not full:
            return None, ""
        plt = self._plt()
        series = {c: self.efficiency_points(c) for c in registry.categories()
                  if any(c in s for s in self.res.categories.values())}
        cats = [c for c, lines in series.items() if lines]  # a category no dataset of which ran at every step: no panel
        if not cats:
            return None, ""
        fig, axes = plt.subplots(1, len(cats), figsize=(max(4 * len(cats), 7), 3.4), squeeze=False)
        rows, noisy = [], []
        for ax, cat in zip(axes[0], cats):
            lines = series[cat]
            for name, points in lines.items():
                ax.errorbar([p[0] for p in points], [p[2].mean for p in points],
                            yerr=_bounded_bars([p[2] for p in points]), marker="o", capsize=3, label=name,
                            ls="-" if name in full else "--")
                rows += [[name, cat, step, round(c.mean, 3), c.ci95] for step, _, c in points]
            for label, score in self.random_reference(cat).items():
                ax.axhline(score.mean, color="grey", ls=":", lw=1.2, label=f"{label} (random init)")
                rows.append([f"{label} (random init)", cat, 0, round(score.mean, 3), score.ci95])
            warning = _dwarfed(list({lb: c for pts in lines.values() for _, lb, c in pts}.values()))
            noisy += [f"{cat} ({warning})"] if warning else []
            ax.set_title(cat)
            ax.set_xlabel("global pretraining step")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("score (mean ± 95% CI over seeds)")
        shown: dict = {}  # every line once, from whichever category has it (the last may have none)
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                shown.setdefault(label, handle)
        axes[0][-1].legend(list(shown.values()), list(shown), fontsize=7)
        fig.suptitle(_wrap_title(fig, "Data efficiency: fine-tuned score vs pretraining steps (datasets evaluated at "
                                      "every step)", plt.rcParams["figure.titlesize"]))
        fig.tight_layout()
        fig.savefig(self.out / "data_efficiency.png", dpi=110)
        plt.close(fig)
        _csv(self.out / "data_efficiency.csv", ["line", "category", "global_step", "score", "ci95"], rows)
        note = ("" if not noisy else "**The intervals dwarf the differences** in " + ", ".join(noisy) +
                ": the median 95% CI half-width exceeds the range of the means, so these lines do not tell the "
                "models or steps apart. ")
        return "data_efficiency.png", note

    def stability_figure(self, labels: list[str], levene: str | None = None) -> tuple[str | None, str]:
        """Centred scores (each run minus its dataset's mean for that model), pooled per category: the spread;
        `levene` names the test the caption sends its reader to (a named set's, such as the paper's Finding 3)."""
        levene = levene or "the Levene test of a `stability:` comparison"
        plt = self._plt()
        cats = [c for c in registry.categories() if any(c in self.res.categories.get(lb, {}) for lb in labels)]
        if not cats:
            return None, ""
        fig, axes = plt.subplots(1, len(cats), figsize=(4 * len(cats), 3.6), squeeze=False)
        rows = []
        for ax, cat in zip(axes[0], cats):
            data, names = [], []
            for lb in labels:
                if not (groups := dataset_runs(self.res, lb, cat)):
                    continue
                if runs := deviations(groups):
                    data.append(runs)
                    names.append(lb)
                seeds = [t.std_seeds for t in self.res.tasks[lb].values() if t.category == cat and t.std_seeds
                         is not None]
                lrs = [t.std_lrs for t in self.res.tasks[lb].values() if t.category == cat and t.std_lrs
                       is not None]
                rows.append([lb, cat, _mean(seeds), _mean(lrs), pooled_sd(groups)])
            if data:
                ax.boxplot(data, orientation="horizontal")
                ax.set_yticks(range(1, len(names) + 1), names, fontsize=7)
            ax.axvline(0, color="grey", lw=0.8)
            ax.set_title(cat)
            ax.set_xlabel("centred score")
        fig.suptitle(_wrap_title(fig, "Fine-tuning stability: every LR x seed run, centred per model and dataset",
                                 plt.rcParams["figure.titlesize"]))
        fig.tight_layout()
        fig.savefig(self.out / "stability.png", dpi=110)
        plt.close(fig)
        _csv(self.out / "stability.csv", ["model", "category", "std_over_seeds", "std_over_lrs", "std_all_runs"],
             rows)
        grid = self.res.plan["protocol"]
        one = {over: ONE[over] if len(grid[over]) < 2 else None for over in ("seeds", "lrs")}  # no spread, not "-"
        table = _table(["model", "category", "std over seeds", "std over LRs", "std within datasets"],
                       [[r[0], r[1], one["seeds"] or _fmt(r[2]), one["lrs"] or _fmt(r[3]), _fmt(r[4])] for r in rows])
        runs = len(grid["lrs"]) * len(grid["seeds"])
        caption = (f"Each box pools a model's runs over a category's datasets ({runs} LR x seed runs per dataset), "
                   "each run minus its dataset's mean: the box is the middle half, whiskers reach 1.5 box lengths. "
                   f"With {runs} runs per dataset a standard deviation is itself uncertain by about "
                   f"{100 / (2 * max(runs - 1, 1)) ** 0.5:.0f}%: read the spreads against {levene}, not by eye.\n\n")
        return "stability.png", caption + table

    def loss_curves(self) -> dict[str, list[tuple[int, float]]]:
        """'RUN (objective)' -> (global step, training loss): CPT runs start at their source's last step."""
        curves = {}
        for run in self.res.runs.values():
            metrics = self.res.losses(run["name"])
            start = self.res.start_step(run["name"])
            for key in sorted({k for m in metrics for k in m if k.endswith("/loss") and not k.startswith("val")}):
                curves[f"{run['name']} ({key.split('/')[0]})"] = [(start + m["step"], m[key]) for m in metrics
                                                                 if key in m]
        return curves

    def loss_figure(self) -> str | None:
        curves = self.loss_curves()
        if not curves:
            return None
        plt = self._plt()
        fig, ax = plt.subplots(figsize=(8, 4))
        for label, pts in curves.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=label)
        cpt = any(r.get("init") or r.get("imported") for r in self.res.runs.values())
        ax.set_xlabel("global step (continued pretraining after its source's steps)" if cpt else "step")
        ax.set_ylabel("training loss")
        ax.set_title(_wrap_title(fig, "Pretraining loss per run and objective (CLM and MLM losses are not comparable)",
                                 plt.rcParams["axes.titlesize"]))
        ax.legend(fontsize=6, ncol=2)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(self.out / "pretraining_loss.png", dpi=110)
        plt.close(fig)
        return "pretraining_loss.png"


TITLE_EM = 0.6  # the mean width of a title's characters in ems, in matplotlib's default font, rounded up


def _wrap_title(fig, text: str, size) -> str:
    """`text` on as many lines as it needs to fit the figure's width at font `size` (points or a name such as
    "large"): a figure is as wide as its panels, and one panel is narrower than a one-line title."""
    from matplotlib.font_manager import FontProperties

    points = FontProperties(size=size).get_size_in_points()
    chars = int(0.95 * fig.get_figwidth() * 72 / (points * TITLE_EM))
    return textwrap.fill(text, max(chars, 20))


def _lrs(lr_by_seed: dict[int, float]) -> str:
    """'lr 5e-05', or 'lrs 5e-05/5e-05/0.0001' in seed order when the seeds kept different LRs."""
    lrs = [lr_by_seed[s] for s in sorted(lr_by_seed)]
    return f"lr {lrs[0]:g}" if len(set(lrs)) == 1 else "lrs " + "/".join(f"{lr:g}" for lr in lrs)


PER_MODEL_DASH = ("A baseline given per model (\"70.00 (a); - (b)\": it reads the text each model's tokenizer keeps "
                  "within max_length) has \"-\" for a model whose records hold no such baseline.")


def _per_model_dash(cell: str) -> bool:
    """Whether a baseline cell given per model (`Report._baseline_cell`) has a model without that baseline."""
    return any(part.startswith("- (") for part in cell.split("; "))


def _score_cell(ts) -> str:
    """'61.20 ± 1.30 (lr 5e-05; +3.10 vs TF-IDF + LR)'; with one seed or no variance over seeds, no interval is
    claimed and the cell says why (`aggregate.ci_text`'s words), never a bare mean read as exact."""
    if ts.test is None or ts.ci95 is not None and ts.std_seeds != 0:
        text = _fmt(ts.test, ts.ci95)
    else:
        text = f"{ts.test:.2f} ± " + (ONE["seeds"] if len(ts.by_seed) < 2 else ZERO_VARIANCE)
    return f"{text} ({_lrs(ts.lr_by_seed)}; {baselines.versus(ts.summary or {})})"


def _csv_row(label: str, ts) -> list:
    best = (ts.summary or {}).get("strongest_baseline") or {}
    gap = round(ts.test - best["value"], 3) if ts.test is not None and best else None
    return [label, ts.task, ts.test, ts.ci95, ts.best_lr, ts.std_seeds, ts.std_lrs, ts.baseline, ts.failed,
            best.get("name"), best.get("value"), gap, ts.constant or ""]


def _bounded_bars(scores: list[CategoryScore]) -> list[list[float]]:
    """Asymmetric error bars cut at the metric's range [0, 100]: a CI drawn below 0 claims impossible scores."""
    cis = [c.ci95 or 0.0 for c in scores]
    return [[min(ci, c.mean) for c, ci in zip(scores, cis)], [min(ci, 100 - c.mean) for c, ci in zip(scores, cis)]]


def _dwarfed(scores: list[CategoryScore]) -> str | None:
    """'median ± 9.71 against a range of 4.62' when the typical interval is wider than the spread of the means."""
    halves = sorted(c.ci95 for c in scores if c.ci95 is not None)
    spread = max(c.mean for c in scores) - min(c.mean for c in scores) if scores else 0.0
    if len(scores) < 2 or not halves or halves[len(halves) // 2] <= spread:
        return None
    return f"median ± {halves[len(halves) // 2]:.2f} against a range of {spread:.2f}"


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def write_report(root: Path, metric: str = "score", reference: Path | None = None,
                 reference_models: tuple[str, ...] = ()) -> Path:
    """`ROOT/report/`, written whole: built in a temporary sibling folder that replaces the old report only when
    every file is written, so files of an earlier report that this one no longer has are gone, and a failure (a
    full disk, a kill) leaves the old report as it was."""
    from encoderlab.study.report_text import compose

    report = Report(root, metric, reference, reference_models)  # reads the study: refused before anything is written
    dest = report.out
    with atomic_dir(dest) as tmp:
        report.out = tmp
        (tmp / "report.md").write_text(compose(report), encoding="utf-8")
    return dest / "report.md"
