"""Meaning of the evaluation metrics, on hand-made cases whose expected values are computed by hand in the comments,
plus NDCG@k against an independent brute-force implementation on random runs."""
from __future__ import annotations

import math
import random

import pytest

from encoderlab.tasks.metrics import (
    accuracy,
    entity_f1,
    macro_f1,
    mean_ci95,
    ndcg_at_k,
    recall_at_k,
    squad_exact,
    squad_f1,
    squad_normalize,
    squad_scores,
    std,
    token_accuracy,
)

# ---------------------------------------------------------------- classification


def test_accuracy_is_percent_of_matches():
    # 3 of 4 right -> 75
    value = accuracy([0, 1, 1, 2], [0, 1, 2, 2])
    assert value == pytest.approx(75.0)
    assert type(value) is float


def test_accuracy_rejects_mismatched_or_empty():
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        accuracy([0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match="no examples"):
        accuracy([], [])


def test_macro_f1_counts_a_never_predicted_class_as_zero():
    labels = [0, 0, 1, 2]
    preds = [0, 0, 1, 1]
    # class 0: tp 2, 2 predicted, 2 gold -> F1 = 2*2/(2+2) = 1
    # class 1: tp 1, 2 predicted, 1 gold -> F1 = 2*1/(2+1) = 2/3
    # class 2: tp 0, never predicted, 1 gold -> F1 = 0
    # mean = (1 + 2/3 + 0) / 3 = 5/9 = 55.555...
    assert macro_f1(preds, labels) == pytest.approx(100 * 5 / 9)
    # classes 3 and 4 are neither gold nor predicted: ignored, not averaged in as 0 (that would give 100/3)
    assert macro_f1(preds, labels, num_labels=5) == pytest.approx(100 * 5 / 9)


def test_macro_f1_counts_a_predicted_but_never_gold_class():
    # class 0: tp 1, 1 predicted, 2 gold -> 2/3; class 1: predicted once, never gold -> 0; mean = 1/3
    assert macro_f1([0, 1], [0, 0]) == pytest.approx(100 / 3)


def test_macro_f1_matches_sklearn_on_random_labels():
    from sklearn.metrics import f1_score

    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 30)
        labels = [rng.randrange(5) for _ in range(n)]
        preds = [rng.randrange(5) for _ in range(n)]
        expected = 100 * f1_score(labels, preds, average="macro", zero_division=0)
        assert macro_f1(preds, labels) == pytest.approx(expected)


def test_macro_f1_checks_num_labels():
    with pytest.raises(ValueError, match=r"classes \[3\] outside \[0, 3\)"):
        macro_f1([0, 3], [0, 1], num_labels=3)


# ---------------------------------------------------------------- token classification


def test_partially_matching_entity_is_wrong():
    # gold PER spans tokens 0-1, predicted PER spans token 0 only: 1 gold, 1 predicted, 0 correct -> P = R = F1 = 0
    scores = entity_f1([["B-PER", "O", "O"]], [["B-PER", "I-PER", "O"]])
    assert scores == {"f1": 0.0, "precision": 0.0, "recall": 0.0}


def test_entity_with_wrong_type_is_wrong():
    scores = entity_f1([["O", "B-ORG", "I-ORG"]], [["O", "B-LOC", "I-LOC"]])
    assert scores["f1"] == 0.0


def test_two_entities_one_right():
    # gold: PER(0-1), LOC(3); predicted: PER(0-1) only -> P = 1/1, R = 1/2, F1 = 2*1*0.5/1.5 = 2/3
    scores = entity_f1([["B-PER", "I-PER", "O", "O"]], [["B-PER", "I-PER", "O", "B-LOC"]])
    assert scores["precision"] == pytest.approx(100.0)
    assert scores["recall"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * 2 / 3)


def test_entity_f1_is_micro_over_sentences():
    refs = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    preds = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-MISC"]]
    # gold: PER, LOC, ORG = 3; predicted: PER, ORG(wrong type at 3), ORG, MISC = 4; correct: PER, ORG = 2
    # P = 2/4 = 50, R = 2/3 = 66.67, F1 = 2*2/(4+3) = 4/7 = 57.14
    scores = entity_f1(preds, refs)
    assert scores["precision"] == pytest.approx(50.0)
    assert scores["recall"] == pytest.approx(100 * 2 / 3)
    assert scores["f1"] == pytest.approx(100 * 4 / 7)
    assert all(type(v) is float for v in scores.values())


def test_entity_f1_is_iob1_tolerant_like_conlleval():
    # seqeval's default (conlleval) reads a leading I- as the start of an entity: I-PER I-PER == B-PER I-PER
    assert entity_f1([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])["f1"] == pytest.approx(100.0)


def test_entity_f1_rejects_length_mismatch():
    with pytest.raises(ValueError, match="sentence 1 has 1 predicted tags but 2 reference tags"):
        entity_f1([["O"], ["O"]], [["O"], ["O", "B-PER"]])
    with pytest.raises(ValueError, match="1 predicted sentences but 2 references"):
        entity_f1([["O"]], [["O"], ["O"]])


def test_token_accuracy():
    # 4 tokens, the second of the first sentence wrong -> 3/4 = 75
    preds = [["DET", "VERB", "VERB"], ["NOUN"]]
    refs = [["DET", "NOUN", "VERB"], ["NOUN"]]
    assert token_accuracy(preds, refs) == pytest.approx(75.0)
    with pytest.raises(ValueError, match="sentence 0"):
        token_accuracy([["DET"]], [["DET", "NOUN"]])


# ---------------------------------------------------------------- question answering


def test_squad_normalize():
    assert squad_normalize("The  Cat!") == "cat"
    assert squad_normalize("An apple, a DAY.") == "apple day"
    assert squad_normalize("theatre anthem") == "theatre anthem"  # articles only as whole words


def test_squad_f1_partial_overlap():
    # pred tokens: cat sat on mat (4); gold tokens: cat on mat (3); common 3
    # P = 3/4, R = 3/3, F1 = 2*0.75*1/1.75 = 6/7 = 85.714
    assert squad_f1("the cat sat on the mat", ["a cat on a mat"]) == pytest.approx(100 * 6 / 7)
    assert squad_exact("the cat sat on the mat", ["a cat on a mat"]) == 0.0
    # overlap is a multiset: "cat cat" vs "cat" -> common 1, P = 1/2, R = 1, F1 = 2/3
    assert squad_f1("cat cat", ["cat"]) == pytest.approx(100 * 2 / 3)
    # "cat cat" vs "cat cat dog" -> common 2 (not 1 as with sets), P = 2/2, R = 2/3, F1 = 2*(2/3)/(5/3) = 4/5
    assert squad_f1("cat cat", ["cat cat dog"]) == pytest.approx(80.0)


def test_squad_takes_the_best_gold():
    # vs "red": P 1/3, R 1 -> 0.5; vs "big red dog house": P 3/3, R 3/4 -> 6/7; vs "cat": 0; max = 6/7
    assert squad_f1("big red dog", ["red", "big red dog house", "cat"]) == pytest.approx(100 * 6 / 7)
    assert squad_exact("big red dog", ["red", "cat"]) == 0.0
    assert squad_exact("big red dog", ["red", "The big red dog."]) == 100.0


def test_squad_unanswerable_rules():
    for score in (squad_f1, squad_exact):
        assert score("", []) == 100.0  # unanswerable, abstained
        assert score("a cat", []) == 0.0  # unanswerable, answered
        assert score("The.", []) == 100.0  # normalises to nothing: an abstention
        assert score("", ["cat"]) == 0.0  # answerable, abstained
        assert score("", ["the"]) == 100.0  # only gold normalises to nothing: unanswerable (official v2 script)


def test_squad_scores_average_over_references():
    refs = {"q1": ["cat"], "q2": [], "q3": ["dog"]}
    preds = {"q1": "black cat", "q2": "", "extra": "ignored"}  # q3 missing -> ""
    # F1: q1 P 1/2 R 1 -> 2/3; q2 unanswerable and empty -> 1; q3 empty -> 0; mean = (2/3 + 1) / 3 = 5/9
    # EM: q1 0, q2 1, q3 0 -> 1/3
    scores = squad_scores(preds, refs)
    assert scores["f1"] == pytest.approx(100 * 5 / 9)
    assert scores["exact_match"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError):
        squad_scores({}, {})


# ---------------------------------------------------------------- retrieval


def test_ndcg_perfect_ranking_is_100():
    run = {"q": {"d1": 0.9, "d2": 0.5, "d3": 0.1}}
    assert ndcg_at_k(run, {"q": {"d1": 2, "d2": 1, "d3": 0}}) == pytest.approx(100.0)


def test_ndcg_single_relevant_doc_at_rank_3():
    # DCG = 1/log2(3+1) = 1/2, IDCG = 1/log2(2) = 1 -> 50
    run = {"q": {"d1": 0.9, "d2": 0.8, "d3": 0.7}}
    assert ndcg_at_k(run, {"q": {"d3": 1}}) == pytest.approx(100 / math.log2(4))
    assert ndcg_at_k(run, {"q": {"d3": 1}}) == pytest.approx(50.0)


def test_ndcg_graded_relevance():
    qrels = {"q": {"a": 3, "b": 2, "c": 1}}
    run = {"q": {"c": 4.0, "a": 3.0, "x": 2.0, "b": 1.0}}  # ranking c, a, x, b
    # DCG  = 1/log2(2) + 3/log2(3) + 0/log2(4) + 2/log2(5) = 1 + 1.892789 + 0 + 0.861353 = 3.754142
    # IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)             = 3 + 1.261860 + 0.5           = 4.761860
    # NDCG = 3.754142 / 4.761860 = 0.788376
    dcg = 1 + 3 / math.log2(3) + 2 / math.log2(5)
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    assert ndcg_at_k(run, qrels) == pytest.approx(100 * dcg / idcg)
    assert ndcg_at_k(run, qrels) == pytest.approx(78.8376, abs=1e-3)


def test_ndcg_ties_are_broken_by_ascending_doc_id():
    run = {"q": {"b": 1.0, "a": 1.0}}  # equal scores: "a" ranks first, "b" second, whatever the dict order
    # relevant "b" at rank 2: 1/log2(3) = 63.09; relevant "a" at rank 1: 100
    assert ndcg_at_k(run, {"q": {"b": 1}}) == pytest.approx(100 / math.log2(3))
    assert ndcg_at_k(run, {"q": {"a": 1}}) == pytest.approx(100.0)


def test_ndcg_gives_no_credit_beyond_k():
    run = {"q": {f"d{i:02d}": 100.0 - i for i in range(1, 12)}}  # d01 first ... d11 at rank 11
    qrels = {"q": {"d11": 1}}
    assert ndcg_at_k(run, qrels, k=10) == 0.0
    assert ndcg_at_k(run, qrels, k=11) == pytest.approx(100 / math.log2(12))


def test_ndcg_ideal_is_cut_at_k():
    # 12 relevant docs, all retrieved first: the ideal DCG@10 also counts 10 docs only, so the score is 100
    docs = [f"d{i:02d}" for i in range(12)]
    run = {"q": {d: float(-i) for i, d in enumerate(docs)}}
    assert ndcg_at_k(run, {"q": dict.fromkeys(docs, 1)}) == pytest.approx(100.0)


def test_ndcg_query_absent_from_run_scores_zero():
    qrels = {"q1": {"d": 1}, "q2": {"d": 1}}
    # q1 perfect (100), q2 not retrieved (0): mean 50
    assert ndcg_at_k({"q1": {"d": 1.0}}, qrels) == pytest.approx(50.0)
    assert ndcg_at_k({"q1": {"d": 1.0}, "q2": {}}, qrels) == pytest.approx(50.0)


def test_ndcg_skips_queries_without_relevant_docs():
    qrels = {"q1": {"d": 1}, "q2": {"e": 0}}  # q2 has no positive grade: skipped, not scored 0
    run = {"q1": {"d": 1.0}, "q2": {"e": 1.0}, "q3": {"f": 1.0}}  # q3 not in qrels: ignored
    assert ndcg_at_k(run, qrels) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="no query"):
        ndcg_at_k(run, {"q2": {"e": 0}})


def _brute_force_ndcg(run, qrels, k):
    """NDCG@k written differently: selection of the best remaining doc, one rank at a time."""
    total, counted = 0.0, 0
    for qid in qrels:
        positive = [g for g in qrels[qid].values() if g > 0]
        if len(positive) == 0:
            continue
        counted += 1
        remaining = dict(run.get(qid, {}))
        dcg = 0.0
        for rank in range(1, k + 1):
            if not remaining:
                break
            best = None
            for doc, score in remaining.items():
                if best is None or score > remaining[best] or (score == remaining[best] and doc < best):
                    best = doc
            del remaining[best]
            dcg += max(qrels[qid].get(best, 0), 0) / math.log(rank + 1, 2)
        idcg = 0.0
        pool = list(positive)
        for rank in range(1, min(k, len(pool)) + 1):
            g = max(pool)
            pool.remove(g)
            idcg += g / math.log(rank + 1, 2)
        total += dcg / idcg
    return 100 * total / counted


def test_ndcg_matches_brute_force_on_random_runs():
    rng = random.Random(1234)
    for _ in range(200):
        docs = [f"d{i}" for i in range(rng.randint(1, 25))]
        run, qrels = {}, {}
        for q in range(rng.randint(1, 5)):
            qid = f"q{q}"
            if rng.random() < 0.8:  # some queries absent from the run
                retrieved = rng.sample(docs, rng.randint(0, len(docs)))
                run[qid] = {d: float(rng.randint(0, 5)) for d in retrieved}  # few distinct scores: many ties
            judged = rng.sample(docs, rng.randint(0, len(docs)))
            qrels[qid] = {d: rng.randint(0, 3) for d in judged}
        if not any(g > 0 for grades in qrels.values() for g in grades.values()):
            continue
        k = rng.choice([1, 3, 10])
        assert ndcg_at_k(run, qrels, k=k) == pytest.approx(_brute_force_ndcg(run, qrels, k))


def test_recall_at_k():
    qrels = {"q1": {"a": 1, "b": 1, "c": 2, "d": 0}, "q2": {"e": 2}, "q3": {"f": 0}}
    run = {"q1": {"a": 5.0, "x": 4.0, "b": 3.0, "d": 2.0, "c": 1.0}}  # ranking a, x, b, d, c
    # k=3: q1 top {a, x, b} holds 2 of 3 relevant -> 2/3; q2 absent -> 0; q3 skipped; mean = 1/3
    assert recall_at_k(run, qrels, k=3) == pytest.approx(100 / 3)
    # k=5: q1 3/3; q2 0; mean = 1/2
    assert recall_at_k(run, qrels, k=5) == pytest.approx(50.0)
    # k=1: only "a" -> 1/3 for q1; mean = 1/6
    assert recall_at_k(run, qrels, k=1) == pytest.approx(100 / 6)


# ---------------------------------------------------------------- aggregation


def test_mean_ci95_by_hand():
    # mean 3; std(ddof=1) = sqrt(10/4) = 1.5811388; / sqrt(5) = 0.7071068; * t_{0.975,4} 2.776445 = 1.963243
    mean, half = mean_ci95([1, 2, 3, 4, 5])
    assert mean == pytest.approx(3.0)
    assert half == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), abs=1e-5)
    assert half == pytest.approx(1.963243, abs=1e-5)
    assert type(mean) is float and type(half) is float


def test_mean_ci95_single_and_empty():
    mean, half = mean_ci95([87.5])
    assert mean == 87.5
    assert math.isnan(half)
    with pytest.raises(ValueError):
        mean_ci95([])


def test_std_is_sample_std():
    # mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32; / (8-1) -> sqrt(32/7) = 2.13809
    assert std([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))
    assert std([7.0]) == 0.0
    with pytest.raises(ValueError):
        std([])
