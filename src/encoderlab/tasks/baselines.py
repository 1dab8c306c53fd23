"""The baselines beside every score: what a model has to beat before its score says it learned something.

Per family, on the validation and test splits, each scored as `evaluate()` scores a model ("score", the protocol's
metric; "standard", the field's; and the rest by name):
- classification: the majority class of train (`majority`) and a lexical model (`tfidf_logreg`): TF-IDF over the
  MAX_FEATURES most frequent words of train (sublinear term frequencies), one vectoriser per text field, and a
  logistic regression (scikit-learn, its defaults, C = 1, but a tolerance of 1e-6: fitted to convergence, where the
  default 1e-4 stops where the predictions depend on the order of the rows and classes) fitted on train; nothing
  is chosen, on test or elsewhere.
  Word bigrams and a C chosen on validation were measured on the offline suite: within a point of this, and several
  times slower to fit (one fit per C, over many more features), so the simpler model stands;
- tokens: every word "O" (`all_o`; the most frequent train tag for tags without chunks, `majority_tag`);
- QA: the first span (`first_span`) and, on a split with unanswerable questions, always answering "no answer"
  (`always_abstain`): a model that learned only to abstain scores exactly this;
- retrieval: a random ranking (`random`: each metric's exact expectation over uniformly random rankings) and BM25
  (`bm25`, the `bm25s` library, its defaults, no stop words, no stemming, so that no language is favoured) over the
  same searched corpus.

The lexical baselines (TF-IDF + LR, BM25) read what the model reads: each text as the prepared token ids cover it,
cut to the protocol's max_length and decoded back to text, so that a score and the baseline it is read against saw
the same input. The same baselines on the whole texts are kept beside them (`tfidf_logreg_full_text`,
`bm25_full_text`): how much the cut costs a reader that sees everything.

They are computed once per task content (the examples and the settings that score them), tokenizer and max_length,
and kept in the tokenisation cache (common.cached): the QA tagging format's spans are token positions, so they
depend on the tokenizer; the others do not but cost little to key the same way.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

import numpy as np

from encoderlab.core.errors import EncoderlabError
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.tasks.base import EvalTask
from encoderlab.tasks.common import cached, content_hash
from encoderlab.tasks.metrics import squad_scores
from encoderlab.tasks.registry import families, family

VERSION = "baselines-v6"  # bump when a baseline changes, so that cached ones are computed again
SPLITS = ("validation", "test")
MAX_FEATURES = 50_000  # per text field: the most frequent words of train
BM25_DEPTH = 100  # documents kept per query, as the model's own search keeps (retrieval.TOP_K)
FULL_TEXT = "_full_text"  # the suffix of a lexical baseline that read whole texts, not the model's view
LEXICAL = ("tfidf_logreg", "bm25")  # the baselines that read text, on the model's view and on the full texts


class _Labels(Mapping[str, str]):
    """How each baseline is named in tables, records and model cards: as its family's record names it (read at each
    use, so a family registered later is named too), and a lexical one on the full texts with "(full text)"."""

    def _all(self) -> dict[str, str]:
        own = {name: label for record in families() for name, label in record.baselines.items()}
        return {**own, **{n + FULL_TEXT: f"{own[n]} (full text)" for n in LEXICAL if n in own}}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


LABELS: Mapping[str, str] = _Labels()


def trivial_name(task: EvalTask) -> str:
    """The name of `task.trivial_baseline`: what the record's `baseline` field has always held."""
    return family(task.family).trivial_name(task.baseline_settings().get)


def compute(task: EvalTask, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None
            ) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {baseline name: scores}} of a prepared task, from the cache when this content was seen before."""
    data = VERSION + content_hash(_content(task))
    return cached(cache_dir, "baselines", task.name, tokenizer, max_length, data, lambda: every(task, tokenizer))


def every(task: EvalTask, tokenizer: TextTokenizer | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {baseline name: scores}}, computed now: the lexical ones (the family's `lexical_baselines`) on the
    model's view of a task prepared with `tokenizer` and on the full texts (without a tokenizer, on the full texts
    only)."""
    out = {split: of_split(task, split) for split in SPLITS}
    lexical = family(task.family).lexical_baselines
    views = [(FULL_TEXT, None), *([("", tokenizer)] if tokenizer is not None else [])]
    for suffix, view in views:
        for split, scores in (lexical(task, view) if lexical else {}).items():
            out[split].update({name + suffix: value for name, value in scores.items()})
    return out


def of_split(task: EvalTask, split: str) -> dict[str, dict[str, float]]:
    """The baselines of one split that need no fitting and read no text: the trivial one and the family's
    `split_baselines` (those that apply to the split)."""
    extra = family(task.family).split_baselines
    return {trivial_name(task): task.trivial_baseline(split), **(extra(task, split) if extra else {})}


def tfidf_baselines(task: EvalTask, view: TextTokenizer | None) -> dict[str, dict[str, dict[str, float]]]:
    """Classification's lexical baseline, fitted once for both splits, on the model's view or (None) full texts."""
    segments = partial(full_segments, task) if view is None else partial(model_segments, task, view)
    if view is not None and not any(text.strip() for field in segments("train") for text in field):
        # a tokenizer without byte fallback or unknown token drops what it has no token for: the model would read
        # only its framing tokens, and the lexical model on that view would have no word to fit
        raise EncoderlabError(f"{task.name}: the tokenizer {view.origin} gives no token for any train text (every "
                              "example would read as its framing tokens alone): its vocabulary does not cover this "
                              "task's text")
    return {split: {"tfidf_logreg": task.score_predictions(predictions, split)}  # type: ignore[attr-defined]
            for split, predictions in tfidf_logreg(task, segments).items()}


def bm25_baselines(task: EvalTask, view: TextTokenizer | None) -> dict[str, dict[str, dict[str, float]]]:
    """Retrieval's lexical baseline on each split, on the model's view or (None) the full texts."""
    out = {}
    for split in SPLITS:
        texts = task.baseline_texts(split) if view is None else model_texts(task, view, split)  # type: ignore[attr-defined]
        out[split] = {"bm25": task.score_run(bm25_run(*texts), split)}  # type: ignore[attr-defined]
    return out


def abstain_baseline(task: EvalTask, split: str) -> dict[str, dict[str, float]]:
    """QA: always answering "no answer", on a split where some question has no answer (or lost it to the cut)."""
    if any(not ex["answers"]["text"] for ex in task.splits[split]) or answers_cut(task, split):  # type: ignore[attr-defined]
        return {"always_abstain": always_abstain(task, split)}
    return {}


# ------------------------------------------------------------------------------------------- the model's view


def full_segments(task: EvalTask, split: str) -> list[list[str]]:
    """A classification split's whole texts, one list per text field."""
    return [[ex[f] for ex in task.splits[split]] for f in task.text_fields]


def model_segments(task: EvalTask, tokenizer: TextTokenizer, split: str) -> list[list[str]]:
    """A classification split as the model reads it, one list per input segment: each prepared sequence without
    its special tokens, split at the EOS that ends a first segment, decoded."""
    rows = []
    for ids in task.ids[split]:
        body = ids[1:] if ids and ids[0] == tokenizer.bos_id else ids
        body = body[:-1] if body and body[-1] == tokenizer.eos_id else body
        parts, part = [], []
        for i in body:  # a text's own "</s>" is text, never the EOS id (encode_special_tokens), so EOS separates
            if i == tokenizer.eos_id:
                parts.append(part)
                part = []
            else:
                part.append(i)
        rows.append([tokenizer.decode(p) for p in [*parts, part]])
    return [list(column) for column in zip(*rows)] if rows else []


def model_texts(task: EvalTask, tokenizer: TextTokenizer, split: str) -> tuple[dict[str, str], dict[str, str]]:
    """`task.baseline_texts(split)` as the model reads them: each document and query as far as its prepared ids
    reach, decoded, without the "Document: " / "Query: " prompt."""
    from encoderlab.tasks.bi_encoder import DOCUMENT_PREFIX, QUERY_PREFIX

    documents, queries = task.baseline_texts(split)
    docs, query_ids = task._prepared()

    def seen(ids: list[int], prompt: str) -> str:
        return tokenizer.decode(ids).removeprefix(prompt.rstrip()).strip()

    return ({d: seen(docs[task._doc_index[d]], DOCUMENT_PREFIX) for d in documents},
            {q: seen(query_ids[task._query_index[q]], QUERY_PREFIX) for q in queries})


def _content(task: EvalTask) -> list:
    """What decides the baselines' scores: the settings that score them and the task's examples."""
    return [task.baseline_settings(), *task.baseline_data()]


def answers_cut(task: EvalTask, split: str) -> int:
    """QA tagging: the answerable questions of a split whose answer the truncated input lost (QATask.answers_cut)."""
    return task.answers_cut(split)  # type: ignore[attr-defined]


def always_abstain(task: EvalTask, split: str) -> dict[str, float]:
    """Every question answered "no answer", scored by the task's own metrics (both QA formats)."""
    examples = task.splits[split]
    if task.tagging is not None:  # set by apply_protocol(): the tagging format
        return task.tagging.scores(split, [[] for _ in examples], ["" for _ in examples])
    scores = squad_scores({ex["id"]: "" for ex in examples}, task.references(split))
    return {"score": scores["f1"], "standard": scores["f1"], **scores}


def tfidf_logreg(task: EvalTask, segments) -> dict[str, list[int]]:
    """{split: predicted label per example} of the lexical classifier, for validation and test; `segments(split)`:
    the split's texts, one list per text field or input segment."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    texts = {s: segments(s) for s in ("train", *SPLITS)}
    vectorisers = [TfidfVectorizer(sublinear_tf=True, max_features=MAX_FEATURES, dtype=np.float32).fit(field)
                   for field in texts["train"]]
    x = {s: hstack([v.transform(field) for v, field in zip(vectorisers, texts[s])]).tocsr()
         for s in ("train", *SPLITS)}
    gold = task.gold
    if len(set(gold["train"])) < 2:  # one class in train: nothing to fit, the majority class is the model
        return {s: [gold["train"][0]] * len(gold[s]) for s in SPLITS}
    # scikit-learn's default tol (1e-4) stops short of the optimum, where the predictions still depend on the order
    # of the train rows and of the class ids (wiki-topic: 76.6 to 77.6 by ordering); at 1e-6 it converges
    model = LogisticRegression(max_iter=1000, tol=1e-6).fit(x["train"], gold["train"])
    return {s: model.predict(x[s]).tolist() for s in SPLITS}


def bm25_run(documents: dict[str, str], queries: dict[str, str]) -> dict[str, dict[str, float]]:
    """{query: {document: BM25 score}}, the top BM25_DEPTH of `documents` for each query, as bm25s ranks them."""
    import bm25s

    ids = list(documents)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(documents.values()), stopwords=None, show_progress=False),
                    show_progress=False)
    words = bm25s.tokenize(list(queries.values()), stopwords=None, show_progress=False, return_ids=False)
    found, scores = retriever.retrieve(words, k=min(BM25_DEPTH, len(ids)), show_progress=False)
    return {q: {ids[int(d)]: float(s) for d, s in zip(found[r], scores[r])} for r, q in enumerate(queries)}


# ------------------------------------------------------------------------------------------- in summaries


def of_records(recs: list[dict], metric: str = "score") -> dict[str, float]:
    """{baseline name: test value on `metric`} of a task's records (the newest that has them). A record from before
    the family's other baselines has only its trivial one (`baseline`): the others are missing, never made up."""
    newest = sorted(recs, key=lambda r: r.get("finished", ""), reverse=True)
    named = next((r["baselines"] for r in newest if isinstance(r.get("baselines"), dict)), {})
    test = named.get("test") if isinstance(named.get("test"), dict) else {}  # a damaged field: what reads as numbers
    found = {n: s[metric] for n, s in test.items() if isinstance(s, dict) and _number(s.get(metric))}
    value = (newest[0].get("baseline") or {}).get("test", {}).get(metric)
    trivial = family(newest[0]["family"]).trivial_name(newest[0].get)
    return ({trivial: value} if _number(value) else {}) | found


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def strongest(named: dict[str, float]) -> tuple[str, float] | None:
    """(name, value) of the best baseline that read what the model read: the one a score has to beat (the first of
    equals in the family's order). A full-text baseline counts only where its model's-view twin is not recorded."""
    usable = {n: v for n, v in named.items() if not n.endswith(FULL_TEXT)}
    usable |= {n: v for n, v in named.items() if n.endswith(FULL_TEXT) and n.removesuffix(FULL_TEXT) not in usable}
    return max(usable.items(), key=lambda kv: kv[1]) if usable else None


def constant_of(kept: list[dict]) -> str | None:
    """What every kept run predicted on test when each predicted one thing, else None; also None when a kept run's
    record is from before predictions were checked (unknown is not constant). Runs that each predict another thing
    read "differing by run: " and the descriptions, `; `-joined: their scores differ, and are not learned either."""
    seen = [r.get("constant_predictions") for r in kept]
    if not kept or any(not isinstance(c, dict) or not isinstance(c.get("test"), str) for c in seen):
        return None
    kinds = sorted({c["test"] for c in seen})
    return kinds[0] if len(kinds) == 1 else "differing by run: " + "; ".join(kinds)


CONSTANT_MARK = "†"  # beside a score most of whose kept runs predict one thing on test (tables and category cells)


def mostly_constant(entry: dict) -> str | None:
    """'no answer in 2 of 3 kept runs' where more than half of a summary entry's kept runs predicted one thing on
    test: a lucky seed is no task learnt."""
    runs = entry.get("constant_runs") or {}
    if not runs.get("of") or runs["runs"] * 2 <= runs["of"]:
        return None
    return f"{runs['predicts']} in {runs['runs']} of {runs['of']} kept runs"


def marked(entry: dict) -> bool:
    """Whether an entry's score carries CONSTANT_MARK: most of its kept runs predict one thing, not all of them (that
    one is said in words, `predicts a constant`)."""
    return bool(mostly_constant(entry)) and not entry.get("constant")


def warning(entry: dict) -> str | None:
    """What a summary's reader must be told before reading its test score as learned: that the model predicts a
    constant, or that it does not beat the strongest baseline."""
    if entry.get("constant"):
        return f"predicts a constant ({entry['constant']})"
    said = []
    if mostly_constant(entry):
        runs = entry["constant_runs"]
        said.append(f"predicts a constant in {runs['runs']} of {runs['of']} kept runs ({runs['predicts']})")
    best, test = entry.get("strongest_baseline"), entry.get("test")
    if best and test is not None and test <= best["value"]:
        said.append(f"not above the {LABELS.get(best['name'], best['name'])} baseline ({best['value']:.2f})")
    return "; ".join(said) or None


# ------------------------------------------------------------------------------------------- in tables

MISSING = ('"-": not in the records (made before that baseline was added; they keep the baselines of their time); '
           '"n/a": does not apply (always abstain: no unanswerable question in test)')


def columns(name: str, entries: list[dict]) -> list[str]:
    """The baseline columns of a family's table: its baselines, in its order, that apply to its tasks (a family
    whose trivial baseline depends on the task, tokens' all "O" or majority tag, shows those its tasks have)."""
    record = family(name)
    names = tuple(record.baselines)
    if record.trivial_baseline is not None:
        names = tuple(n for n in names if any(n in e.get("baselines", {}) for e in entries)) or names[:1]
    full = [n + FULL_TEXT for n in names if n in LEXICAL]  # beside the model's view, where the records have it
    return [*names, *(n for n in full if any(n in e.get("baselines", {}) for e in entries))]


def cell(entry: dict, name: str) -> str:
    """A baseline's test value in a table: the number, "-" (not recorded) or "n/a" (does not apply)."""
    value = entry.get("baselines", {}).get(name)
    if value is not None:
        return f"{value:.2f}"
    return "n/a" if entry.get("baselines_recorded") else "-"


def versus(entry: dict) -> str:
    """The test score against the strongest baseline, saying which; or why it cannot be read as learned."""
    if entry.get("constant"):
        return f"predicts a constant ({entry['constant']})"
    best = entry.get("strongest_baseline")
    if entry.get("test") is None or not best:
        return "-"
    mark = f" {CONSTANT_MARK}" if marked(entry) else ""  # as the category cells mark it
    return f"{entry['test'] - best['value']:+.2f} vs {LABELS.get(best['name'], best['name'])}{mark}"
