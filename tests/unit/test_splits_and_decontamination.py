"""Deterministic stratified splits, deduplication of labelled text, and removal of evaluation text from a corpus.
Synthetic data only: no download."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from encoderlab.data import decontaminate as dc
from encoderlab.data.offline.build import SPLITS, assign_splits, classification_task, stable_key

# ----------------------------------------------------------------------------------------------- splits


def make_keys(n_a: int = 1000, n_b: int = 300) -> tuple[list[str], list[str]]:
    keys = [stable_key(f"a{i}") for i in range(n_a)] + [stable_key(f"b{i}") for i in range(n_b)]
    strata = ["pos"] * n_a + ["neg"] * n_b
    return keys, strata


def test_assign_splits_is_deterministic_and_complete():
    keys, strata = make_keys()
    first = assign_splits(keys, strata)
    assert first == assign_splits(list(keys), list(strata))
    assert set(first) == set(keys)  # complete: every key has a split
    assert set(first.values()) == set(SPLITS)  # each key maps to exactly one of the three (dict: disjoint)
    parts = {s: {k for k, v in first.items() if v == s} for s in SPLITS}
    assert sum(len(p) for p in parts.values()) == len(keys)
    assert not parts["train"] & parts["validation"] and not parts["train"] & parts["test"]
    assert not parts["validation"] & parts["test"]


def test_assign_splits_does_not_depend_on_input_order():
    keys, strata = make_keys()
    pairs = list(zip(keys, strata))
    random.Random(7).shuffle(pairs)
    shuffled = assign_splits([k for k, _ in pairs], [s for _, s in pairs])
    assert shuffled == assign_splits(keys, strata)


def test_assign_splits_fractions_per_stratum():
    keys, strata = make_keys(1000, 300)
    split_of = assign_splits(keys, strata)
    for stratum, n in (("pos", 1000), ("neg", 300)):
        counts = Counter(split_of[k] for k, s in zip(keys, strata) if s == stratum)
        assert counts["validation"] == round(0.1 * n)
        assert counts["test"] == round(0.1 * n)
        assert counts["train"] == n - 2 * round(0.1 * n)


def test_assign_splits_is_shuffled_and_seeded():
    keys, strata = make_keys()
    a = assign_splits(keys, strata, seed=1)
    b = assign_splits(keys, strata, seed=2)
    assert a != b  # the seed matters
    # Not simply the first/last keys in sorted order: the test keys are spread over the sorted range.
    ordered = sorted(k for k, s in zip(keys, strata) if s == "pos")
    test_ranks = [i for i, k in enumerate(ordered) if a[k] == "test"]
    assert min(test_ranks) < 200 and max(test_ranks) > 800


def test_assign_splits_stratum_is_independent_of_other_strata():
    """Adding a new stratum does not move the keys of an existing one."""
    keys, strata = make_keys()
    base = assign_splits(keys, strata)
    extra = [stable_key(f"c{i}") for i in range(50)]
    grown = assign_splits(keys + extra, strata + ["new"] * 50)
    assert all(grown[k] == base[k] for k in keys)


def test_assign_splits_duplicate_keys_counted_once():
    split_of = assign_splits(["x", "x", "y"], ["s", "s", "s"])
    assert set(split_of) == {"x", "y"}


# ----------------------------------------------------------------------------------------------- dedupe


def test_classification_task_dedupes_and_drops_conflicts():
    rows = [(f"Review number {i} is about a film.", i % 2) for i in range(200)]
    rows += [
        ("A Great movie!", 1),
        ("a great   MOVIE", 1),  # normalises like the one above, same label -> one copy kept
        ("a great movie.", 1),
        ("Bad film.", 0),
        ("bad FILM", 1),  # same text, other label -> both dropped
    ]
    task = classification_task("toy", "Toy task.", ["negative", "positive"], rows, "toy")
    examples = [ex for s in SPLITS for ex in task.splits[s]]
    norms = [dc.normalize(ex["text"]) for ex in examples]
    assert len(norms) == len(set(norms))  # no normalised duplicate anywhere
    assert norms.count("a great movie") == 1
    assert "bad film" not in norms
    assert len(examples) == 200 + 1
    assert "Duplicates removed: 4." in task.description  # 2 extra copies + 2 conflicting
    # ids unique, labels preserved
    assert len({ex["id"] for ex in examples}) == len(examples)
    by_norm = {dc.normalize(t): y for t, y in rows}
    assert all(ex["label"] == by_norm[dc.normalize(ex["text"])] for ex in examples)
    # ~80/10/10, stratified by label (100 per label, + the kept positive duplicate)
    for label in (0, 1):
        counts = Counter(s for s in SPLITS for ex in task.splits[s] if ex["label"] == label)
        assert counts["validation"] == 10 and counts["test"] == 10


def test_classification_task_split_is_a_function_of_the_text():
    rows = [(f"sentence {i} with some words", i % 2) for i in range(100)]
    a = classification_task("toy", "", ["n", "p"], rows, "toy")
    b = classification_task("toy", "", ["n", "p"], list(reversed(rows)), "toy")
    assert a.splits == b.splits


# ----------------------------------------------------------------------------------------------- decontaminate

LONG_EVAL = "the committee approved the new budget for the coastal railway on tuesday morning"  # 14 words
SHORT_EVAL = "Peter Blackburn ."  # CoNLL tokenisation, 2 words


def test_normalize():
    assert dc.normalize("Peter  Blackburn .") == dc.normalize("peter blackburn.") == "peter blackburn"
    assert dc.normalize("It's  GREAT,\nreally!") == "it s great really"


def test_line_equal_to_example_is_removed():
    doc = {"id": "d1", "source": "x", "text": "A first line that stays.\npeter   BLACKBURN.\nA last line that stays."}
    kept, stats = dc.decontaminate([doc], [SHORT_EVAL])
    assert kept == [{"id": "d1", "source": "x", "text": "A first line that stays.\nA last line that stays."}]
    assert stats["lines_equal_to_an_example"] == 1
    assert stats["documents_equal_to_an_example"] == 0


def test_document_equal_to_example_is_removed():
    docs = [{"id": "d1", "source": "x", "text": "Peter Blackburn"}, {"id": "d2", "source": "x", "text": "other"}]
    kept, stats = dc.decontaminate(docs, [SHORT_EVAL])
    assert [d["id"] for d in kept] == ["d2"]
    assert stats["documents_equal_to_an_example"] == 1


def test_long_example_inside_a_longer_line_removes_the_document():
    inside = ("Local news. " + LONG_EVAL.upper().replace(" ON ", ", on ") + " -- said the clerk, "
              "and everybody went home.")
    docs = [
        {"id": "contains", "source": "x", "text": "Header line.\n" + inside + "\nFooter line."},
        {"id": "unrelated", "source": "x", "text": "The river flooded the valley in the spring of that year."},
    ]
    kept, stats = dc.decontaminate(docs, [LONG_EVAL])
    assert [d["id"] for d in kept] == ["unrelated"]
    assert kept[0] == docs[1]  # unrelated documents are untouched
    assert stats["documents_containing_an_example"] == 1


def test_example_split_over_two_lines_of_one_document_is_removed():
    words = LONG_EVAL.split()
    text = "Intro.\n" + " ".join(words[:6]) + "\n" + " ".join(words[6:]) + " and more"
    kept, stats = dc.decontaminate([{"id": "d", "source": "x", "text": text}], [LONG_EVAL])
    assert kept == [] and stats["documents_containing_an_example"] == 1


def test_shared_short_phrase_does_not_remove_a_document():
    words = LONG_EVAL.split()
    docs = [
        {"id": "phrase", "source": "x", "text": "Yesterday " + " ".join(words[:7]) + " was rejected."},
        {"id": "tail", "source": "x", "text": "Unrelated: " + " ".join(words[-7:]) + "!"},
    ]
    kept, stats = dc.decontaminate(docs, [LONG_EVAL])
    assert kept == docs
    assert stats["documents_containing_an_example"] == 0 and stats["lines_equal_to_an_example"] == 0


def test_short_examples_only_match_by_equality():
    """An example shorter than NGRAM words is not searched inside lines (it would remove common phrases)."""
    docs = [{"id": "d", "source": "x", "text": "Mr Peter Blackburn spoke to reporters."}]
    kept, _ = dc.decontaminate(docs, [SHORT_EVAL])
    assert kept == docs


def test_possibly_contained_needs_every_ngram():
    words = LONG_EVAL.split()  # 14 words -> 7 n-grams of 8
    index = dc.corpus_ngram_index([dc.words(" ".join(words[:-1]) + " evening")])  # last n-gram missing
    assert dc.possibly_contained([dc.words(LONG_EVAL)], index) == []
    index = dc.corpus_ngram_index([dc.words("so " + LONG_EVAL.upper() + " indeed")])
    assert dc.possibly_contained([dc.words(LONG_EVAL), dc.words("too short to test")], index) == [0]
    assert dc.possibly_contained([dc.words(LONG_EVAL)], dc.corpus_ngram_index([])) == []


def test_the_first_ngram_hash_is_the_arrays_first():
    rng = random.Random(7)
    for n in range(dc.NGRAM + 12):
        words = ["".join(rng.choices("abcdeé東", k=rng.randint(1, 5))) for _ in range(n)]
        arrays, first = dc.ngram_hashes(words), dc.first_ngram_hash(words)
        assert (first is None) if n < dc.NGRAM else (first == int(arrays[0]) and len(arrays) == n - dc.NGRAM + 1)
    assert dc.first_ngram_hash("a b c d e f g h".split()) != dc.first_ngram_hash("a b c d e f h g".split())


def test_ngrams_do_not_span_documents():
    words = LONG_EVAL.split()
    index = dc.corpus_ngram_index([dc.words(" ".join(words[:5])), dc.words(" ".join(words[5:]))])
    assert dc.possibly_contained([dc.words(LONG_EVAL)], index) == []


def test_suspect_spread_over_two_documents_is_kept():
    """Every n-gram occurs, but in two documents that overlap: a suspect, yet no document contains it."""
    words = LONG_EVAL.split()
    docs = [
        {"id": "a", "source": "x", "text": "Start. " + " ".join(words[:11]) + " etc."},  # n-grams 0..3
        {"id": "b", "source": "x", "text": "More: " + " ".join(words[4:]) + " end."},  # n-grams 4..6
    ]
    index = dc.corpus_ngram_index(dc.words(d["text"]) for d in docs)
    assert dc.possibly_contained([dc.words(LONG_EVAL)], index) == [0]  # flagged as suspect by the n-gram proof
    assert not any(dc.normalize(LONG_EVAL) in dc.normalize(d["text"]) for d in docs)
    kept, stats = dc.decontaminate(docs, [LONG_EVAL])
    assert kept == docs  # ... but only a document that really contains it is removed
    assert stats["documents_containing_an_example"] == 0


@pytest.mark.parametrize("n_docs", [50])
def test_decontaminate_many_examples(n_docs):
    """Mixed batch: each contaminated document goes, every clean one stays."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(500)]
    examples = [" ".join(rng.choice(vocab) for _ in range(12)) for _ in range(30)]
    docs = []
    for i in range(n_docs):
        body = " ".join(rng.choice(vocab) for _ in range(40))
        if i % 5 == 0:
            body = body[:20] + " " + examples[i % 30] + " " + body[20:]
        docs.append({"id": f"d{i}", "source": "x", "text": body})
    kept, _ = dc.decontaminate(docs, examples)
    expected = [d for d in docs if not any(dc.normalize(e) in dc.normalize(d["text"]) for e in examples)]
    assert kept == expected
    assert len(kept) <= n_docs - n_docs // 5


def test_prepared_documents_normalise_each_line_as_normalize_does():
    """`prepare_documents` finds all lines' normal forms at once: the same as `normalize` line by line, whatever
    the characters (line breaks other than \\n, underscores, digits, case changes that change a word's length, final
    sigma, combining marks)."""
    rng = random.Random(3)
    alphabet = "aZ9_ \t.,'-\n\n\r\x0b\x0c\x1c\x85\u2028éÉßİΣσς東\u0307…"
    docs = [{"id": str(i), "source": "x", "text": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))}
            for i in range(500)]
    for doc, p in zip(docs, dc.prepare_documents(docs)):
        lines = doc["text"].split("\n")
        assert p.lines == lines
        assert p.line_norms == [dc.normalize(line) for line in lines]
        assert p.norm == dc.normalize(doc["text"])
        assert p.hashes.tolist() == dc._word_hashes(dc.words(doc["text"])).tolist()


def test_decontaminate_with_prepared_documents_is_the_same():
    words = LONG_EVAL.split()
    docs = [{"id": "line", "source": "x", "text": "A first line that stays.\npeter   BLACKBURN.\nA last line."},
            {"id": "equal", "source": "x", "text": "Peter Blackburn"},
            {"id": "inside", "source": "x", "text": "Intro.\n" + " ".join(words[:6]) + "\n" + " ".join(words[6:])},
            {"id": "blank", "source": "x", "text": " \n\t"},
            {"id": "after", "source": "x", "text": "Peter Blackburn\n" + LONG_EVAL + " and more"},
            {"id": "kept", "source": "x", "text": "The river flooded the valley in the spring of that year."}]
    examples = [SHORT_EVAL, LONG_EVAL]
    kept, stats = dc.decontaminate(docs, examples, dc.prepare_documents(docs))
    assert (kept, stats) == dc.decontaminate(docs, examples)
    assert [d["id"] for d in kept] == ["line", "kept"] and kept[0]["text"] == "A first line that stays.\nA last line."
    assert stats["documents_containing_an_example"] == 2 and stats["lines_equal_to_an_example"] == 2


def test_possibly_contained_is_each_example_checked_alone():
    """All examples' n-grams are found at once: none that spans two examples may count."""
    rng = random.Random(11)
    vocab = ["a", "b", "c"]  # few words: n-grams repeat within examples, across them and in the corpus
    for _ in range(300):
        corpus = [[rng.choice(vocab) for _ in range(rng.randint(0, 30))] for _ in range(rng.randint(0, 3))]
        examples = [[rng.choice(vocab) for _ in range(rng.choice([0, 3, 7, 8, 9, 15]))]
                    for _ in range(rng.randint(0, 6))]
        index = dc.corpus_ngram_index(corpus)
        present = set(index.tolist())
        alone = [i for i, e in enumerate(examples)
                 if len(e) >= dc.NGRAM and set(dc.ngram_hashes(e).tolist()) <= present]
        assert dc.possibly_contained(examples, index) == alone
