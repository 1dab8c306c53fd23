"""`encoderlab mteb` names a model whose frozen embeddings carry nothing of a task (hub/mteb_eval.py `summary_row`):
a classification accuracy within the majority class's 95% sampling margin on the test examples, or a retrieval
score not above a random ranking, is said in the summary and on the console, beside the score."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from encoderlab.cli.mteb import _render_mteb
from encoderlab.hub import mteb_eval


def scored(name: str, kind: str, metric: str, score: float, family: str, baselines: dict, n_test: int):
    metadata = SimpleNamespace(name=f"encoderlab-{name}", type=kind, main_score=metric)
    offline = SimpleNamespace(family=family, baseline_settings=lambda: {}, gold={"test": [0] * n_test})
    task = mteb_eval.Task(name, SimpleNamespace(metadata=metadata), offline)
    result = SimpleNamespace(task_results=[SimpleNamespace(task_name=metadata.name,
                                                           scores={"test": [{"main_score": score}]})])
    return task, result, {"test": {k: {"standard": v} for k, v in baselines.items()}}


@pytest.mark.parametrize("score, at_chance", [(0.5014, True), (0.5072, True), (0.5925, False)])
def test_a_classification_score_within_chance_of_the_majority_class_is_named(monkeypatch, capsys, score, at_chance):
    task, result, baselines = scored("rt-polarity", "Classification", "accuracy", score, "classification",
                                     {"majority": 50.0, "tfidf_logreg_full_text": 74.77}, 852)
    monkeypatch.setattr(mteb_eval.task_baselines, "every", lambda t: baselines)
    row = mteb_eval.summary_row(task, result)
    assert ("learned nothing" in (row.get("warning") or "")) is at_chance
    if at_chance:  # the bound is the majority rate plus 1.645 standard errors of 852 draws
        assert "52.82" in row["warning"] and "852 test examples" in row["warning"]
    _render_mteb({"mteb_version": "2", "model": "m", "results": "r", "out": "o", "tasks": [row]})
    said = " ".join(capsys.readouterr().out.split())
    assert ("rt-polarity: learned nothing" in said) is at_chance


@pytest.mark.parametrize("score, at_chance", [(0.0, True), (0.0005, True), (0.3, False)])
def test_a_retrieval_score_not_above_a_random_ranking_is_named(monkeypatch, score, at_chance):
    task, result, baselines = scored("wiki-title", "Retrieval", "ndcg_at_10", score, "retrieval",
                                     {"random": 0.05, "bm25_full_text": 85.37}, 1004)
    monkeypatch.setattr(mteb_eval.task_baselines, "every", lambda t: baselines)
    row = mteb_eval.summary_row(task, result)
    assert ("learned nothing" in (row.get("warning") or "")) is at_chance
    if at_chance:
        assert "random ranking (0.05)" in row["warning"]
