"""Where a category score stands: against the strongest baseline of its datasets, and with or without the tasks
whose model mostly predicts a constant (study/intervals.py computes both; this module words them)."""
from __future__ import annotations

from encoderlab.finetuning.aggregate import ONE
from encoderlab.study.intervals import CategoryScore
from encoderlab.study.tables import _fmt
from encoderlab.tasks.baselines import CONSTANT_MARK
CONSTANT_RULE = (f"{CONSTANT_MARK}: the category has a task where more than half of the model's kept runs predict "
                 "one thing on test (one class, one tag, \"no answer\", the same ranking): its score there is no "
                 "evidence of learning, so the cell also gives the category's mean without such tasks.")


ONE_SEED_IN_A_DATASET = "undefined (a dataset with one seed)"


def category_cell(c: CategoryScore) -> str:
    """'61.20 ± 1.30'; where every seed scored the same or a dataset has one seed, no interval is claimed and the
    cell says why (not '± 0.00', not a bare mean); a category with a mostly-constant task is marked and shown without
    it too."""
    if c.ci95 is not None and c.ci95 <= 1e-9 * max(1.0, abs(c.mean)) and c.seeds > 1:  # 0 up to rounding
        text = f"{c.mean:.2f} ± undefined (zero variance" + (f": {'; '.join(c.constant)})" if c.constant else ")")
    elif c.ci95 is None:  # a dataset with one seed: no interval, said as the per-dataset cell says it
        text = f"{c.mean:.2f} ± {ONE_SEED_IN_A_DATASET if c.datasets > 1 else ONE['seeds']}"
    else:
        text = _fmt(c.mean, c.ci95)
    if not c.mostly_constant:
        return text
    rest = c.without_constant
    return f"{text} {CONSTANT_MARK}; without them: " + (_fmt(rest.mean, rest.ci95) if rest else "no task left")


def dataset_constant_note(flagged: list[str]) -> str:
    """The note under the per-dataset tables for their marked cells ('CLM / conll-ner: 'O' for every word in 2 of 3
    kept runs'), as CONSTANT_RULE is for the category tables; "" when none is."""
    if not flagged:
        return ""
    return (f" {CONSTANT_MARK}: more than half of the model's kept runs predict one thing on test, so its score there "
            f"is no evidence of learning: {'; '.join(flagged)}.")


def constant_lines(scores: dict[str, dict[str, CategoryScore]], cats: list[str]) -> list[str]:
    """'- CLM / QA: disfl-qa: no answer in 3 of 3 kept runs' for every flagged cell of a table."""
    return [f"- {lb} / {cat}: {'; '.join(s[cat].mostly_constant)}" for lb, s in scores.items() for cat in cats
            if cat in s and s[cat].mostly_constant]


def lexical_lines(scores: dict[str, dict[str, CategoryScore]], cats: list[str]) -> list[str]:
    """Per category, each model's score minus the mean of its datasets' strongest baselines, and "no model beats
    it" where none is above."""
    out = []
    for cat in cats:
        have = {lb: s[cat] for lb, s in scores.items() if cat in s and s[cat].lexical is not None}
        if not have:
            continue
        first = next(iter(have.values()))
        each = len({round(c.lexical, 2) for c in have.values()}) > 1  # a baseline on each model's truncated text
        gaps = ", ".join(f"{lb} {c.mean - c.lexical:+.2f} (above it on {c.above_lexical} of {c.datasets} "
                         f"datasets{f'; it is {c.lexical:.2f} for this model' if each else ''})"
                         for lb, c in have.items())
        none = "no model beats it: " if all(c.mean <= c.lexical for c in have.values()) else ""
        value = "per model's tokenizer" if each else f"{first.lexical:.2f}"
        out.append(f"- {cat}, strongest baseline {first.lexical_names} ({value}): {none}{gaps}")
    return out


def standing_notes(scores: dict[str, dict[str, CategoryScore]], cats: list[str]) -> str:
    """The notes under a category table: constant tasks, then the strongest baselines."""
    parts = []
    if flagged := constant_lines(scores, cats):
        parts.append(CONSTANT_RULE + "\n\n" + "\n".join(flagged))
    if lexical := lexical_lines(scores, cats):
        parts.append("Against the strongest baseline of each dataset (TF-IDF + LR, BM25, majority class, ...; the "
                     "mean over the category's datasets of each one's strongest, beside each model's category "
                     "score minus it):\n\n" + "\n".join(lexical))
    return "\n\n".join(parts) + ("\n\n" if parts else "")
