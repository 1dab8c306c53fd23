"""The baselines beside every score (tasks/baselines.py), each on a small fixture with a value checked by
hand, and the mark of a model that learned nothing: constant predictions, in the record, the summary and the table."""
from __future__ import annotations

import bm25s
import pytest
import torch

from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning import migrate_records
from encoderlab.finetuning.aggregate import summarize
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks import baselines
from encoderlab.tasks.base import CONSTANT, constant
from encoderlab.tasks.classification import ClassificationTask
from encoderlab.tasks.qa import QATask
from encoderlab.tasks.retrieval import RetrievalTask

GOOD, BAD = "great lovely superb wonderful".split(), "awful dreadful horrid terrible".split()


def sentiment(n: int, positive_share: float) -> list[dict]:
    """Texts whose words say their label (1: GOOD words, 0: BAD words): separable by words alone."""
    ones = round(n * positive_share)
    return [{"text": f"the film was {(GOOD if i < ones else BAD)[i % 4]} indeed", "label": int(i < ones)}
            for i in range(n)]


def test_tfidf_logreg_beats_the_majority_class_on_a_separable_set():
    task = ClassificationTask("toy", {"train": sentiment(80, 0.4), "validation": sentiment(10, 0.3),
                                      "test": sentiment(10, 0.4)}, ["neg", "pos"])
    test = baselines.every(task)["test"]  # no tokenizer: the full texts only
    assert test["majority"]["score"] == 60.0  # train's majority is "neg": 6 of the 10 test examples
    assert test["tfidf_logreg_full_text"]["score"] == test["tfidf_logreg_full_text"]["standard"] == 100.0
    assert "tfidf_logreg" not in test


def test_pairs_get_a_vectoriser_per_field_and_one_class_falls_back_to_it():
    rows = [{"a": f"w{i}", "b": f"v{i}", "label": 0} for i in range(4)]
    train = [*rows, {"a": "w9", "b": "v9", "label": 1}]  # one class only is refused: a subsample may leave one
    task = ClassificationTask("pairs", {"train": train, "validation": rows, "test": rows}, ["x", "y"], ("a", "b"))
    task.subsample("train", 1, seed=0)
    (kept,) = {ex["label"] for ex in task.splits["train"]}
    assert baselines.every(task)["test"]["tfidf_logreg_full_text"]["score"] == (100.0 if kept == 0 else 0.0)


def qa_rows(answers: list[str | None]) -> list[dict]:
    out = []
    for i, a in enumerate(answers):
        context = f"story {i} took place in {a or 'nowhere'} long ago"
        gold = {"text": [a], "answer_start": [context.index(a)]} if a else {"text": [], "answer_start": []}
        out.append({"id": f"q{i}", "context": context, "question": f"where was story {i}?", "answers": gold})
    return out


def test_always_abstain_scores_the_share_of_unanswerable_questions():
    test = qa_rows(["Paris", None, "Oslo", None])  # 2 of 4 unanswerable: 50
    task = QATask("qa", {"train": qa_rows(["Rome", None]), "validation": qa_rows(["Bonn"]), "test": test},
                  allow_unanswerable=True)
    task.tagging = None  # the spans format, as apply_protocol() sets it
    found = baselines.every(task)
    assert found["test"]["always_abstain"]["score"] == found["test"]["always_abstain"]["exact_match"] == 50.0
    assert "always_abstain" not in found["validation"]  # every validation question has an answer: not applicable
    assert set(found["test"]) == {"first_span", "always_abstain"}


def test_qa_that_always_abstains_is_marked_constant_and_scores_the_baseline(monkeypatch):
    task = QATask("qa", {s: qa_rows(["Paris", None, "Oslo", None]) for s in ("train", "validation", "test")},
                  allow_unanswerable=True)
    task.tagging = None
    monkeypatch.setattr(task, "predict", lambda *a: {ex["id"]: "" for ex in task.splits["test"]})
    scores = task.evaluate(None, None, "test", 8)
    assert scores[CONSTANT] == "no answer"
    assert scores["score"] == baselines.always_abstain(task, "test")["score"] == 50.0


def retrieval_task() -> RetrievalTask:
    corpus = {"d0": {"title": "", "text": "the red fox jumps"}, "d1": {"title": "Harbor", "text": "boats and nets"},
              "d2": {"title": "", "text": "a quiet library of old maps"}, "d3": {"title": "", "text": "red maps"}}
    queries = {"q0": "red fox", "q1": "old library maps", "q2": "boats harbor"}
    qrels = {"train": {"q1": {"d3": 1}}, "validation": {"q2": {"d1": 1}}, "test": {"q0": {"d0": 1}, "q1": {"d2": 1}}}
    return RetrievalTask("ir", corpus, queries, qrels)


def test_bm25_ranks_the_exact_match_first_and_equals_the_library_scored_by_our_metric():
    task = retrieval_task()
    run = baselines.bm25_run(*task.baseline_texts("test"))
    assert [max(run[q], key=run[q].get) for q in ("q0", "q1")] == ["d0", "d2"]
    bm25 = baselines.every(task)["test"]["bm25_full_text"]
    assert bm25["score"] == 100.0  # each relevant document ranked first
    # the library's own ranking, scored by encoderlab's metric, is the baseline's score
    documents, queries = task.baseline_texts("test")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(documents.values()), stopwords=None, show_progress=False), show_progress=False)
    found, scores = retriever.retrieve(bm25s.tokenize(list(queries.values()), stopwords=None, show_progress=False),
                                       k=len(documents), show_progress=False)
    ids = list(documents)
    own = {q: {ids[d]: float(s) for d, s in zip(found[r], scores[r])} for r, q in enumerate(queries)}
    assert task.score_run(own, "test") == bm25
    assert set(baselines.of_split(task, "test")) == {"random"}


def test_baselines_are_computed_once_per_content(tmp_path, monkeypatch):
    task = ClassificationTask("toy", {"train": sentiment(8, 0.5), "validation": sentiment(4, 0.5),
                                      "test": sentiment(4, 0.5)}, ["neg", "pos"])
    tok = train_bpe([ex["text"] for ex in sentiment(8, 0.5)], 300)
    task.prepare(tok, 32)
    first = baselines.compute(task, tok, 32, tmp_path)
    monkeypatch.setattr(baselines, "every", lambda t, tok: pytest.fail("computed again for the same content"))
    assert baselines.compute(task, tok, 32, tmp_path) == first
    task.splits["test"] = sentiment(4, 0.25)  # other content: computed again
    task.prepare(tok, 32)
    with pytest.raises(pytest.fail.Exception):
        baselines.compute(task, tok, 32, tmp_path)


def test_constant_needs_two_equal_predictions():
    assert constant([1, 1, 1], str) == {CONSTANT: "1"}
    assert constant([1, 0, 1], str) == {} and constant([1], str) == {} and constant([], str) == {}


def test_a_classifier_that_predicts_one_class_is_named(tmp_path):
    task = ClassificationTask("toy", {s: sentiment(6, 0.5) for s in ("train", "validation", "test")}, ["neg", "pos"])
    tok = train_bpe([ex["text"] for ex in sentiment(8, 0.5)], 300)
    task.prepare(tok, 32)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    backbone = Transformer(cfg)
    backbone.init_weights(0)
    head = task.make_head(16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        head.weight.zero_(), head.bias.copy_(torch.tensor([0.0, 5.0]))  # "pos" whatever the text
    assert task.evaluate(backbone, head, "test", 4)[CONSTANT] == "class 'pos'"


def record(seed: int, test: float, **extra) -> dict:
    return {"task": "qa", "family": "qa", "metric": "f1", "status": "ok", "lr": 1e-3, "seed": seed,
            "finished": "2026-01-01T00:00:00", "scores": {"validation": {"score": test}, "test": {"score": test}},
            "baseline": {"test": {"score": 4.03}}, **extra}


NEW = {"baselines": {"test": {"first_span": {"score": 4.03}, "always_abstain": {"score": 32.0}}},
       "constant_predictions": {"test": "no answer"}}


def test_summary_of_a_model_that_always_abstains():
    [entry] = summarize([record(0, 32.0, **NEW), record(1, 32.0, **NEW)])["tasks"].values()
    assert entry["constant"] == "no answer" and entry["warning"] == "predicts a constant (no answer)"
    assert entry["strongest_baseline"] == {"name": "always_abstain", "value": 32.0}
    assert baselines.versus(entry) == "predicts a constant (no answer)"
    assert [baselines.cell(entry, n) for n in baselines.columns("qa", [entry])] == ["4.03", "32.00"]


def test_lexical_baselines_read_what_the_model_reads_with_the_full_text_beside():
    """The words that decide the label (classification) or the match (retrieval) sit past max_length: on the
    model's view the lexical baselines cannot see them, on the full texts they can; both are recorded, and the one a
    score is read against is the model's view."""
    filler = " ".join(["plain"] * 40)

    def rows(n: int) -> list[dict]:
        return [{"text": f"{filler} {(GOOD if i % 2 else BAD)[i % 4]}", "label": i % 2} for i in range(n)]

    tok = train_bpe([filler, *GOOD, *BAD], 300)
    task = ClassificationTask("late", {"train": rows(40), "validation": rows(10), "test": rows(10)}, ["neg", "pos"])
    task.prepare(tok, 16)
    test = baselines.every(task, tok)["test"]
    assert test["tfidf_logreg_full_text"]["score"] == 100.0 and test["tfidf_logreg"]["score"] == 50.0
    assert baselines.model_segments(task, tok, "test")[0][0].split() == ["plain"] * 14  # 16 less <bos> and <eos>

    corpus = {f"d{i}": {"title": "", "text": f"{filler} {word}"} for i, word in enumerate([*GOOD, *BAD])}
    queries = {f"q{i}": word for i, word in enumerate([*GOOD, *BAD])}
    qrels = {split: {f"q{i}": {f"d{i}": 1} for i in range(8)} for split in ("validation", "test")}
    qrels["train"] = {f"q{i}": {f"d{(i + 1) % 8}": 1} for i in range(8)}  # no test answer trained on
    ir = RetrievalTask("late-ir", corpus, queries, qrels)
    ir.prepare(tok, 16)
    test = baselines.every(ir, tok)["test"]
    assert test["bm25_full_text"]["score"] == 100.0 and test["bm25"]["score"] < 50.0
    docs, found = baselines.model_texts(ir, tok, "test")
    (seen,) = set(docs.values())  # every document cut before its word, the "Document: " prompt left out
    assert found == queries and set(seen.split()) == {"plain"} and len(seen.split()) < 14
    named = {"bm25": test["bm25"]["score"], "bm25_full_text": 100.0, "random": 1.0}
    assert baselines.strongest(named)[0] == "bm25"  # the full-text reader is beside it, not what a model must beat


def test_records_from_before_the_models_view_read_as_full_text():
    old = record(0, 30.0, baselines={"test": {"random": {"score": 1.0}, "bm25": {"score": 80.0}}})
    read = migrate_records.upgrade({**old, "family": "retrieval"}, "r.json")  # as records.load_all reads it
    [entry] = summarize([read])["tasks"].values()
    assert entry["baselines"] == {"random": 1.0, "bm25_full_text": 80.0}
    assert entry["strongest_baseline"] == {"name": "bm25_full_text", "value": 80.0}
    assert baselines.columns("retrieval", [entry]) == ["random", "bm25", "bm25_full_text"]


def test_a_score_below_the_strongest_baseline_is_flagged_and_one_above_is_measured_against_it():
    named = {"baselines": {"test": {"first_span": {"score": 4.03}, "always_abstain": {"score": 32.0}}},
             "constant_predictions": {}}
    [low] = summarize([record(0, 30.0, **named)])["tasks"].values()
    assert low["constant"] is None and low["warning"] == "not above the always abstain baseline (32.00)"
    [high] = summarize([record(0, 40.0, **named)])["tasks"].values()
    assert high["warning"] is None and baselines.versus(high) == "+8.00 vs always abstain"


def test_a_task_whose_kept_runs_mostly_predict_a_constant_is_flagged_by_the_sweep():
    """A token task where 2 of 3 kept runs tagged every word "O" (entity F1 0) and one scored 6.35 read "+2.12 vs
    all O" with no warning in the sweep's table and the model card: only the study report flagged it."""
    base = {"baselines": {"test": {"first_span": {"score": 0.0}}}}
    runs = [record(0, 0.0, **base, constant_predictions={"test": "'O' for every word"}),
            record(1, 6.35, **base, constant_predictions={}),
            record(2, 0.0, **base, constant_predictions={"test": "'O' for every word"})]
    [entry] = summarize(runs)["tasks"].values()
    assert entry["constant"] is None
    assert entry["warning"] == "predicts a constant in 2 of 3 kept runs ('O' for every word)"
    [half] = summarize(runs[:2])["tasks"].values()  # 1 of 2: not more than half, as the study report reads it
    assert half["warning"] is None


def test_the_sweep_table_marks_a_mostly_constant_task_as_the_category_table_does(capsys, monkeypatch):
    """The sweep's per-dataset table read "+2.12 vs first span" beside a warning below; the study's category table
    marks such a score with a dagger, and so do the dataset tables now."""
    from encoderlab.cli.console import out
    from encoderlab.cli.sweep_table import render_sweep

    monkeypatch.setattr(out, "width", 300)  # no cell wrapped
    base = {"baselines": {"test": {"first_span": {"score": 0.0}}}}
    runs = [record(0, 0.0, **base, constant_predictions={"test": "'O' for every word"}),
            record(1, 6.36, **base, constant_predictions={}),
            record(2, 0.0, **base, constant_predictions={"test": "'O' for every word"})]
    summary = summarize(runs)
    [entry] = summary["tasks"].values()
    assert baselines.versus(entry) == "+2.12 vs first span †"
    assert baselines.versus(summarize(runs[:2])["tasks"]["qa"]) == "+3.18 vs first span"  # 1 of 2: no mark
    render_sweep({**summary, "tag": "t", "protocol_key": "k", "summary_file": "s.json", "runs_done_this_time": 3,
                  "seconds_this_time": 1.0, "protocol": {"name": "p", "max_steps": 1, "batch_size": 1,
                                                          "lrs": [1e-3], "seeds": [0, 1, 2], "selection_split": "v"}})
    printed = " ".join(capsys.readouterr().out.split())
    assert "+2.12 vs first span †" in printed
    assert "† qa: predicts a constant in 2 of 3 kept runs ('O' for every word)" in printed


def test_records_from_before_the_baselines_read_with_dashes():
    [entry] = summarize([record(0, 32.0), record(1, 30.0)])["tasks"].values()  # no baselines, no constant field
    assert entry["baselines"] == {"first_span": 4.03} and entry["constant"] is None
    assert [baselines.cell(entry, n) for n in ("first_span", "always_abstain")] == ["4.03", "-"]
    assert baselines.versus(entry) == "+26.97 vs first span"  # (32 + 30) / 2 - 4.03


def test_the_sweep_table_says_which_baseline_and_that_predictions_are_constant(capsys, monkeypatch):
    from encoderlab.cli.console import out
    from encoderlab.cli.sweep_table import render_sweep

    monkeypatch.setattr(out, "width", 300)  # no cell wrapped

    summary = summarize([record(0, 32.0, **NEW), record(1, 32.0, **NEW)])
    render_sweep({**summary, "tag": "t", "protocol_key": "k", "summary_file": "e/t/k/summary.json",
                  "runs_done_this_time": 2, "seconds_this_time": 1.0,
                  "protocol": {"name": "p", "max_steps": 1, "batch_size": 1, "lrs": [1e-3], "seeds": [0, 1],
                               "selection_split": "validation"}})
    printed = " ".join(capsys.readouterr().out.split())
    assert "always abstain" in printed and "first span" in printed
    assert "predicts a constant (no answer)" in printed and "undefined (zero variance)" in printed
    assert "± 0.00" not in printed
    assert "not in the records" not in printed  # every baseline is there: no note about missing ones


def test_seeds_that_each_predict_another_constant_have_an_interval(capsys, monkeypatch):
    """One seed predicting one class (52) and the next the other (48) vary: the table printed "undefined (zero
    variance)" beside a summary with std 2.83 and ci95 25.41, and the warning named two classes as one constant."""
    from encoderlab.cli.console import out
    from encoderlab.cli.sweep_table import render_sweep

    monkeypatch.setattr(out, "width", 300)  # no cell wrapped
    runs = [record(0, 52.0, constant_predictions={"test": "class 'pos'"}),
            record(1, 48.0, constant_predictions={"test": "class 'neg'"})]
    summary = summarize(runs)
    [entry] = summary["tasks"].values()
    assert entry["ci95"] == 25.412 and entry["constant"] == "differing by run: class 'neg'; class 'pos'"
    render_sweep({**summary, "tag": "t", "protocol_key": "k", "summary_file": "s.json", "runs_done_this_time": 2,
                  "seconds_this_time": 1.0, "protocol": {"name": "p", "max_steps": 1, "batch_size": 1,
                                                          "lrs": [1e-3], "seeds": [0, 1], "selection_split": "v"}})
    printed = " ".join(capsys.readouterr().out.split())
    assert "± 25.41" in printed and "zero variance" not in printed
    assert "qa: predicts a constant (differing by run: class 'neg'; class 'pos')" in printed


def test_one_seed_or_one_lr_has_no_interval_and_no_spread(capsys, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from encoderlab.cli.console import out
    from encoderlab.cli.sweep_table import render_sweep
    from encoderlab.finetuning.aggregate import ci_text, spread_text
    from encoderlab.study.report import Report
    from encoderlab.study.results import task_scores

    [one] = summarize([record(0, 40.0)])["tasks"].values()  # one seed, one LR: it used to print std 0.00
    assert (ci_text(one), spread_text(one, "seeds"), spread_text(one, "lrs")) == (
        "undefined (one seed)", "undefined (one seed)", "undefined (one LR)")
    grid = [record(0, 40.0), record(1, 44.0), {**record(0, 30.0), "lr": 1e-4}, {**record(1, 30.0), "lr": 1e-4}]
    [two] = summarize(grid)["tasks"].values()
    assert (spread_text(two, "seeds"), spread_text(two, "lrs")) == ("2.83", "8.48")  # std of 40, 44; of 42, 30
    monkeypatch.setattr(out, "width", 300)  # no cell wrapped
    render_sweep({"tasks": {"qa": one}, "tag": "t", "protocol_key": "k", "summary_file": "e/t/k/summary.json",
                  "runs_done_this_time": 1, "seconds_this_time": 1.0,
                  "protocol": {"name": "p", "max_steps": 1, "batch_size": 1, "lrs": [1e-3], "seeds": [0],
                               "selection_split": "validation"}})
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ qa"))
    cells = [cell.strip() for cell in row.split("│")]
    assert cells.count("undefined (one seed)") == 2 and "undefined (one LR)" in cells and "0.00" not in cells
    report = SimpleNamespace(res=SimpleNamespace(  # the study report's stability table, from one seed and one LR
        categories={"m": {"QA": None}}, tasks={"m": {"qa": task_scores([record(0, 40.0)])}},
        plan={"protocol": {"seeds": [0], "lrs": [1e-3]}}), out=tmp_path, _plt=Report._plt.__get__(object()))
    _, table = Report.stability_figure(report, ["m"])
    assert "| m | QA | undefined (one seed) | undefined (one LR) | - |" in table
    assert "| std over seeds | std over LRs | std within datasets |" in table  # each run centred on its dataset


def test_a_comparison_without_variance_says_so_instead_of_zero_statistics():
    from encoderlab.study.sanity import _holds_cell
    from encoderlab.study.compare import cmp_rows as _cmp_rows
    from encoderlab.study.intervals import spread_of
    from encoderlab.study.results import CategoryScore, compare, verdict

    a = CategoryScore(32.0, 0.0, spread_of([[32.0, 32.0]]), 1, constant=["squad2: no answer"])
    b = CategoryScore(32.0, 0.0, spread_of([[32.0, 32.0]]), 1, constant=["squad2: no answer"])
    c = compare(a, b, "QA")
    assert (c.ci95, c.p, c.mde) == (None, None, None)
    assert c.undefined == "undefined: no variance over seeds, the predictions are constant (squad2: no answer)"
    for text in (_cmp_rows([c]), _holds_cell(c), verdict([c])):
        assert "± 0.00" not in text and "p 1.000" not in text and "differences of 0.00" not in text
        assert "the predictions are constant (squad2: no answer)" in text
    from encoderlab.study.report import _category_cell

    assert _category_cell(a) == "32.00 ± undefined (zero variance: squad2: no answer)"
    plain = CategoryScore(32.0, 0.0, spread_of([[32.0, 32.0]]), 1)
    steady = compare(CategoryScore(40.0, 0.0, spread_of([[40.0, 40.0]]), 1), plain, "QA")  # none constant: still no p
    assert steady.p is None and "each side scored the same on every seed" in steady.undefined


def test_the_model_card_shows_the_strongest_baseline_and_names_a_constant_model():
    from encoderlab.hub.card import evaluation_lines, model_index

    learned = {"family": "retrieval", "metric": "ndcg@10", "test": 95.0, "ci95": 1.0, "best_lr": 1e-4, "seeds": 3,
               "std_over_seeds": 0.8, "test_examples": 300, "strongest_baseline": {"name": "bm25", "value": 93.4},
               "warning": None}
    abstains = {"family": "qa", "metric": "f1", "test": 32.0, "ci95": 0.0, "best_lr": 1e-4, "seeds": 3,
                "std_over_seeds": 0.0, "constant": "no answer", "warning": "predicts a constant (no answer)",
                "strongest_baseline": {"name": "always_abstain", "value": 32.0}}
    evaluation = [{"protocol": "p", "path": "summary.json", "tasks": {"wikihow": learned, "squad2": abstains}}]
    card = "\n".join(evaluation_lines(evaluation))
    assert "| wikihow | retrieval | ndcg@10 | 95.00 | ± 1.00 | 0.0001 | 3 | 300 | BM25 93.40 | +1.60 vs BM25 |" in card
    assert ("| squad2 | qa | f1 | 32.00 | undefined (zero variance) | 0.0001 | 3 | - | always abstain 32.00 | "
            "predicts a constant (no answer) |") in card
    assert "- `f1`: SQuAD word-overlap F1" in card and "- `ndcg@10`: NDCG@10 with linear gains" in card  # defined
    names = [r["metrics"][0]["name"] for r in model_index("m", evaluation)[0]["results"]]
    assert names[0].endswith("; strongest baseline BM25 93.40)")
    assert names[1].endswith("; strongest baseline always abstain 32.00; predicts a constant (no answer))")


def test_a_ranking_that_is_the_same_for_every_query_is_named(monkeypatch):
    task = retrieval_task()
    same = {"d3": 2.0, "d0": 1.0, "d2": 0.5}
    monkeypatch.setattr(task, "search", lambda *a: {q: dict(same) for q in ("q0", "q1")})
    assert task.evaluate(None, None, "test", 4)[CONSTANT] == "the same top 10 for every query, 'd3' first"
    monkeypatch.setattr(task, "search", lambda *a: {"q0": dict(same), "q1": {"d2": 1.0, "d3": 0.5}})
    assert CONSTANT not in task.evaluate(None, None, "test", 4)


def test_zero_variance_up_to_rounding_is_still_zero_variance():
    # Per-seed category means of constant scores differ in their last bits: no interval is claimed for them either.
    from encoderlab.study.report import _category_cell
    from encoderlab.study.intervals import spread_of
    from encoderlab.study.results import CategoryScore, compare

    a = CategoryScore(13.7, 4.9e-15, spread_of([[13.7, 13.700000000000001, 13.7], [13.7] * 3]), 2,
                      constant=["qa: no answer"])
    b = CategoryScore(13.7, 0.0, spread_of([[13.7] * 3, [13.7] * 3]), 2, constant=["qa: no answer"])
    assert compare(a, b, "QA").undefined.startswith("undefined: no variance over seeds")
    assert _category_cell(a) == "13.70 ± undefined (zero variance: qa: no answer)"


def test_a_tokenizer_that_gives_no_token_for_the_text_is_refused_in_one_line():
    """A BPE without byte fallback or unknown token drops every character it has no token for: the model would
    read `<s> </s>` for every text, and the lexical baseline on that view had nothing to fit (a traceback)."""
    from tokenizers import Tokenizer, models

    from encoderlab.core.errors import EncoderlabError
    from encoderlab.data.tokenizer import TextTokenizer

    specials = {"<s>": 0, "</s>": 1, "<pad>": 2, "<mask>": 3}
    tok = TextTokenizer(Tokenizer(models.BPE(vocab=specials, merges=[])), 0, 1, 2, 3, origin="toy-bpe")
    task = ClassificationTask("toy", {"train": sentiment(20, 0.5), "validation": sentiment(4, 0.5),
                                      "test": sentiment(4, 0.5)}, ["neg", "pos"])
    task.prepare(tok, 16)
    with pytest.raises(EncoderlabError, match=r"^toy: the tokenizer toy-bpe gives no token for any train text"):
        baselines.every(task, tok)
