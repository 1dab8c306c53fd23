"""The study report's MTEB section: the scores of `evaluation.mteb` (study/jobs.py `MtebJob`, one summary.json per
model under mteb/LABEL/), one row per model and one column per task, the tasks' baselines in rows below them."""
from __future__ import annotations

import json
from pathlib import Path

from encoderlab.study.tables import _table


def summaries(root: Path, labels: list[str]) -> dict[str, dict]:
    """{label: summary} of the models whose MTEB job finished, in the order of `labels`."""
    found = {}
    for label in labels:
        file = Path(root) / "mteb" / label / "summary.json"
        try:
            found[label] = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return found


def mteb_section(root: Path, labels: list[str], asked: list[str] | None = None) -> str:
    """'' when the study ran no MTEB job to the end. `asked`: the plan's `evaluation.mteb` tasks, the only ones shown
    (a summary of a task list the study file gave before keeps its folder, not its place here); None: none asked."""
    done = summaries(root, labels)
    done = {label: dict(s, tasks=[r for r in s["tasks"] if r["task"] in (asked or [])]) for label, s in done.items()}
    done = {label: s for label, s in done.items() if s["tasks"]}
    if not done:
        return ""
    tasks: dict[str, str] = {}  # task -> its main metric, in the order first seen
    baselines: dict[str, dict[str, float]] = {}  # baseline -> task -> score
    for summary in done.values():
        for row in summary["tasks"]:
            tasks.setdefault(row["task"], row["metric"])
            for name, value in row["baselines"].items():
                baselines.setdefault(name, {})[row["task"]] = value
    scores = {label: {row["task"]: row["score"] for row in s["tasks"]} for label, s in done.items()}

    def cells(by_task: dict[str, float]) -> list[str]:
        return [f"{by_task[t]:.2f}" if t in by_task else "-" for t in tasks]

    rows = [[label, *cells(scores[label])] for label in done]
    rows += [[f"*{name}*", *cells(by_task)] for name, by_task in baselines.items()]
    version = next(iter(done.values()))["mteb_version"]
    chance = [f"- {label} / {row['task']}: {row['warning']}" for label, s in done.items() for row in s["tasks"]
              if row.get("warning")]  # the command's own verdict (hub/mteb_eval.py `at_chance`)
    said = "".join(f"{line}\n" for line in chance)
    said = f"\nNo evidence of learning (the score is within chance of its trivial baseline):\n{said}"
    return (f"## MTEB (frozen embeddings)\n\n{_table(['model', *(f'{t} ({m})' for t, m in tasks.items())], rows)}\n\n"
            f"Test scores of the mteb library ({version}) on each model as it is, nothing fine-tuned: offline tasks as "
            "MTEB custom tasks (retrieval: NDCG@10 of a cosine search over the corpus; classification: a logistic "
            "regression on the embeddings of 8 train examples per label, 10 draws); the baselines in italics are "
            "encoderlab's, on the full texts (docs/mteb.md). mteb's own result files are under mteb/LABEL/results/.\n"
            + (said if chance else ""))
