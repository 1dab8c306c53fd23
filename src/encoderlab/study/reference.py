"""The paper authors' own per-run results (their EncodEval repository's `results/` folder), aggregated by the same code
as a study's records under the authors' own LR rule, so that their numbers can stand beside ours (docs/paper.md).

Their layout: `<model>/<TASK>/<dataset>/<run>/results.json`, run = `lr{LR}_sd{SEED}` or, for IR (one model trained
on MS MARCO pairs per LR and seed, scored on each IR set), `msmarco_pairs_lr{LR}_sd{SEED}`; each file holds
`{"validation": {"score": x}, "test": {"score": y}}` as fractions (per-example `scores_i` beside them, ignored). A
file with a validation score only is a run whose test score is missing: left out and named, never fatal.
Their score is their protocol's metric (configs/eval/paper.yaml's); they kept no standard metric.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from encoderlab.core.errors import EncoderlabError, option
from encoderlab.finetuning.aggregate import finite_number
from encoderlab.study.results import CategoryScore, TaskScore, category_scores, task_scores
from encoderlab.study.tables import _csv, _fmt, _table
from encoderlab.tasks import registry

# The datasets of the paper's category means, under the authors' folder names -> encoderlab's task names. Their
# repository also holds QA/qed, which is not part of the published QA means (ReCoRD, SQuAD, SQuAD v2 reproduce them
# exactly): it is skipped, and said.
DATASETS = {"SC": {"sst2": "sst2", "mnli_m": "mnli", "qqp": "qqp"},
            "TC": {"conll2003_en": "conll2003", "ontonotes": "ontonotes", "uner_en": "uner"},
            "QA": {"squad": "squad", "squad_v2": "squad_v2", "record": "record"},
            "IR": {"msmarco": "msmarco", "nq": "nq", "mldr_en": "mldr"}}
for _names in DATASETS.values():  # a copy renamed to encoderlab's task names reads the same
    _names.update({ours: ours for ours in list(_names.values())})
# The authors' rule (docs/paper.md, Aggregation): for each seed the LR with the best validation score, that run's
# test score. Their numbers are theirs, so a study's own `lr_choice` never applies to them.
AUTHORS_LR_CHOICE = "per_seed"
RUN = re.compile(r"(?:msmarco_pairs_)?lr(\d+(?:\.\d+)?(?:e[+-]?\d+)?)_sd(\d+)")


@dataclass
class Reference:
    model: str
    tasks: dict[str, TaskScore]
    categories: dict[str, CategoryScore]
    notes: list[str]  # runs missing from the grid, datasets skipped: said, never fatal


def load_reference(root: Path, model: str, lr_choice: str = AUTHORS_LR_CHOICE) -> Reference:
    """One model's results under `root` (the authors' `results/` folder), aggregated under `lr_choice` (the authors'
    rule unless asked otherwise) by the same function as a study's records (aggregate.choose_runs via
    results.task_scores), scores x100."""
    folder = Path(root) / model
    if not folder.is_dir():
        have = sorted(p.name for p in Path(root).iterdir() if p.is_dir()) if Path(root).is_dir() else []
        raise EncoderlabError(f"no model {model!r} in {root} (the authors' results/ folder has one folder per model"
                              + (f", e.g. {', '.join(have[:3])})" if have else "; this one has none)"))
    recs, notes = read_runs(folder)
    by_task: dict[str, list[dict]] = {}
    for r in recs:
        by_task.setdefault(r["task"], []).append(r)
    # a run without a test score is one `summarize` counts as lacking the metric: it is never chosen
    tasks = {name: task_scores(rs, lr_choice) for name, rs in sorted(by_task.items())}
    return Reference(model, tasks, category_scores(tasks), notes + _outscored(by_task, tasks, lr_choice))


def _outscored(by_task: dict[str, list[dict]], tasks: dict[str, TaskScore], lr_choice: str) -> list[str]:
    """Runs without a test score that beat their seed's kept run on validation: the rule would have kept them, so
    that dataset's score is not the rule's (per seed only, where a run's choice depends on its own score)."""
    if lr_choice != "per_seed":
        return []
    lines = []
    for name, rs in by_task.items():
        val = {(r["lr"], r["seed"]): r["scores"]["validation"]["score"] for r in rs}
        for r in rs:
            kept = tasks[name].lr_by_seed.get(r["seed"])
            if not r["scores"]["test"] and (kept is None or val[r["lr"], r["seed"]] > val[kept, r["seed"]]):
                lines.append(f"{name}: lr {r['lr']:g} seed {r['seed']} has that seed's best validation score but no "
                             "test score, so this dataset's score is not the authors' rule's")
    return lines


def read_runs(folder: Path) -> tuple[list[dict], list[str]]:
    """Every run of one model as a study record (what `summarize` reads; a run with a validation score only has an
    empty test), and notes on what is missing or skipped."""
    recs, notes, grid = [], [], {}
    for task_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for data_dir in sorted(p for p in task_dir.iterdir() if p.is_dir()):
            where, name = f"{task_dir.name}/{data_dir.name}", DATASETS.get(task_dir.name, {}).get(data_dir.name)
            if name is None:
                notes.append(f"{where}: skipped (not a dataset of the paper's category means)")
                continue
            runs, untested = {}, []  # every run present, (lr, seed) -> its folder; those without a test score
            for run_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
                if not (run_dir / "results.json").exists():
                    continue  # a run that never finished: missing, counted below
                lr, seed = _run_name(run_dir)
                val, test = _scores(run_dir / "results.json")
                if (lr, seed) in runs:  # lr1e-04_sd0 and lr0.0001_sd0: aggregating would keep one of them
                    raise EncoderlabError(f"{run_dir}: the run of lr {lr:g} seed {seed}, as {runs[lr, seed]} is "
                                          "(one folder per run)")
                runs[lr, seed] = run_dir.name
                if test is None:
                    untested.append(run_dir.name)
                recs.append({"task": name, "family": registry.by_category(task_dir.name).name,
                             "metric": "the authors' score",
                             "status": "ok", "lr": lr, "seed": seed, "baseline": {},
                             "scores": {"validation": {"score": 100 * val},
                                        "test": {} if test is None else {"score": 100 * test}}})
            grid[where] = runs, untested
    lrs = sorted({lr for runs, _ in grid.values() for lr, _ in runs})
    seeds = sorted({seed for runs, _ in grid.values() for _, seed in runs})
    for where, (runs, untested) in grid.items():
        if missing := len(lrs) * len(seeds) - len(runs) + len(untested):
            notes.append(f"{where}: {missing} of {len(lrs) * len(seeds)} runs ({len(lrs)} LRs x {len(seeds)} seeds) "
                         "missing (aggregated without them)"
                         + (f"; {len(untested)} of them have a validation score only: {', '.join(untested)}"
                            if untested else ""))
    return recs, notes


def _run_name(run_dir: Path) -> tuple[float, int]:
    m = RUN.fullmatch(run_dir.name)
    if m is None:
        raise EncoderlabError(f"{run_dir}: a run folder is named lr<LR>_sd<SEED> or msmarco_pairs_lr<LR>_sd<SEED>")
    return float(m[1]), int(m[2])


def _scores(path: Path) -> tuple[float, float | None]:
    """(validation, test) scores of one results.json, test None where the file has no test split (a run whose test
    score is missing); anything else is refused, naming the file."""
    try:
        data = json.loads(path.read_text())
        scores = (data["validation"]["score"],) + ((data["test"]["score"],) if "test" in data else ())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EncoderlabError(f"{path}: not valid JSON ({exc})") from None
    except (KeyError, TypeError):
        raise EncoderlabError(f"{path}: no validation.score, or a test without its score (the authors' results.json "
                              'holds {"validation": {"score": x}, "test": {"score": y}})') from None
    if not all(finite_number(x) for x in scores):
        raise EncoderlabError(f"{path}: validation.score and test.score must be numbers, not {scores}")
    if not all(0 <= x <= 1 for x in scores):  # read x100: a percent would stand as thousands of points
        raise EncoderlabError(f"{path}: validation.score and test.score are fractions in [0, 1] in the authors' "
                              f"results.json, not {scores}")
    return scores[0], (scores[1] if len(scores) > 1 else None)


def reference_section(report) -> str:
    """report.md's section: the chosen models of the authors' results/ folder aggregated by the authors' own rule
    (whatever this study's `lr_choice`), each beside the study's model it is matched with (same name, or
    `OURS=MODEL`)."""

    if report.reference is None:
        if report.reference_models:
            raise EncoderlabError("--reference-model needs --reference: the authors' results/ folder")
        return ""
    res, root = report.res, Path(report.reference)
    if not root.is_dir():
        raise EncoderlabError(f"{option('reference', root)}: no such folder (give the authors' results/ folder)")
    if next(root.glob("*/*/*/*/results.json"), None) is None:
        raise EncoderlabError(f"{option('reference', root)}: no MODEL/TASK/DATASET/RUN/results.json in it (give the "
                              "authors' results/ folder)")
    pairs = [(m.split("=", 1)[0], m.split("=", 1)[1]) if "=" in m else (m if m in res.evaluations else None, m)
             for m in report.reference_models]
    pairs = pairs or [(lb, lb) for lb in res.evaluations if (root / lb).is_dir()]
    if not pairs:
        return (f"## The authors' own runs\n\nNo evaluation of this study names a model folder of `{root}`: choose "
                "them with `--reference-model MODEL` or `--reference-model OURS=MODEL`.\n")
    rows, csv_rows, notes = [], [], []
    for ours, theirs in pairs:
        if ours is not None and ours not in res.evaluations:
            raise EncoderlabError(f"--reference-model {ours}={theirs}: {ours!r} is no evaluation of this study "
                                  f"(e.g. {', '.join(list(res.evaluations)[:3])})")
        ref = load_reference(root, theirs)
        mine = res.categories.get(ours, {}) if ours else {}
        rows.append([theirs, "authors' runs"] + [_fmt(ref.categories[c].mean, ref.categories[c].ci95)
                                                 if c in ref.categories else "-" for c in registry.categories()])
        if ours:
            rows.append([ours, "this study"] + [_fmt(mine[c].mean, mine[c].ci95) if c in mine else "-"
                                                for c in registry.categories()])
        csv_rows += [[theirs, t, s.test, s.ci95, " ".join(f"{lr:g}" for _, lr in sorted(s.lr_by_seed.items()))]
                     for t, s in ref.tasks.items()]
        notes += [f"- {theirs}: {n}" for n in ref.notes]
        if ours:
            notes += _dataset_note(theirs, ref.tasks, ours, res.tasks.get(ours, {}))
    _csv(report.out / "reference.csv", ["authors_model", "task", "test", "ci95", "lr_by_seed"], csv_rows)
    return ("## The authors' own runs, aggregated by their rule\n\n"
            f"The paper authors' per-run results (`{root}`, their EncodEval `results/` layout) aggregated by the "
            f"same code as this study's records under the authors' rule (`lr_choice: {AUTHORS_LR_CHOICE}`: each "
            "seed's best LR on validation, the mean of those runs' test scores; their fractions x100), whatever "
            f"this study's (`lr_choice: {res.lr_choice}`), each beside the study's model it is matched with. The "
            "authors' rows are their protocol's metric, the only one their files hold; this study's rows are as in "
            f"every table here ({res.metric}). Per dataset: `reference.csv`.\n\n"
            + _table(["model", "source"] + registry.categories(), rows) + "\n\n" + "\n".join(notes) + "\n")


def _dataset_note(theirs: str, their_tasks: dict, ours: str, our_tasks: dict) -> list[str]:
    """Where a category averages other datasets on the two sides, say so: those cells do not compare."""
    lines = []
    for cat in registry.categories():
        a = sorted(t for t, s in their_tasks.items() if s.category == cat)
        b = sorted(t for t, s in our_tasks.items() if s.category == cat)
        if a and b and {_same_name(t) for t in a} != {_same_name(t) for t in b}:
            lines.append(f"- {cat}: {theirs} averages {', '.join(a)}, {ours} averages {', '.join(b)}: other datasets, "
                         "so this cell does not compare the models")
    return lines


def _same_name(task: str) -> str:
    """encoderlab's name of a dataset either side may call it by (the authors' `mnli_m` is `mnli`)."""
    return next((names[task] for names in DATASETS.values() if task in names), task)
