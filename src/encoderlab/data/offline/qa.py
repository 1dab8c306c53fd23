"""Extractive QA stand-ins of the offline suite: cloze questions in the ReCoRD manner, and a title-matching task.

Every example takes its split from its *source unit* (a Wikipedia article's split from `raw["units"]["wikipedia"]`,
a CoNLL-2003 document's split = the file it is in), so no validation or test passage or question is in the
pretraining corpus, which holds train units only. Every answer is a span of its passage: `answers["text"][i] ==
context[answer_start[i] : answer_start[i] + len(text)]`, all occurrences of the answer string listed. Choices that
need randomness use a generator seeded by (SEED, task, unit), so the output does not depend on input order.

- `conll-cloze`: passage = the first sentences of a CoNLL-2003 document, question = a later sentence of it with
  one entity mention replaced by "@placeholder", answered by the same entity string in the passage.
- `wiki-cloze`: passage = a Wikipedia lead minus one sentence, question = that sentence with one capitalised name
  (or, failing that, the rarest content word) that also occurs in the passage replaced by "@placeholder".
- `wiki-title-span`: passage = three leads of the same topic and split, question = the description of one of them,
  answer = that article's title as written in its lead.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from encoderlab.data.offline.taskfiles import SPLITS, write_task_folder
from encoderlab.data.offline.units import SPLIT_SEED, detokenize, stable_key

RECIPE = 1
SEED = SPLIT_SEED
PLACEHOLDER = "@placeholder"
CONLL_PASSAGE_MIN_WORDS = 60  # the passage is the shortest prefix of sentences with at least this many tokens
CONLL_MAX_PER_DOCUMENT = 10  # questions per document, so that long documents do not dominate
TITLE_SPAN_LEADS = 3  # the matching lead and two distractors

# Function words (and a few Wikipedia boilerplate words) never chosen as a cloze answer.
STOPWORDS = frozenset("""
a an the and or but nor if then else of in on at to for from by with as into onto over under after before during
while about between through within without upon up down out off than so such is are was were be been being am it
its this that these those he she they his her hers their theirs them him we us our you your i me my not no yes
which who whom whose what when where why how also other some any all each every many most more much few less least
can could may might will would shall should must do does did done has have had having one two three first second
very only just even still however although though because since until unless whether either neither both well
known called used became become becomes including include includes often usually generally later several various
per via there here among against across along around toward towards throughout like unlike same own part parts
""".split())
_ABBREVIATIONS = frozenset("mr mrs ms dr st jr sr vs c ca mt no nos fig figs inc ltd co gen lt col sgt prof rev "
                           "approx est dept univ vol e.g i.e etc al".split())
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]?\.?")
_NAME = re.compile(r"[A-Z][\w'\-]*(?:\s+(?:(?:of|de|von|van|der|la|du|da)\s+(?:the\s+)?)?[A-Z][\w'\-]*)*")
_WORD = re.compile(r"[A-Za-z][a-z]{3,}")


# ----------------------------------------------------------------------------------------------- helpers


def _rng(*keys: str) -> np.random.Generator:
    return np.random.default_rng([SEED] + [int(stable_key(k)[:8], 16) for k in keys])


def _whole_word(needle: str, ignore_case: bool = False) -> re.Pattern:
    return re.compile(r"(?<![\w\-])" + re.escape(needle) + r"(?![\w\-])", re.IGNORECASE if ignore_case else 0)


def _word_char(text: str, i: int) -> bool:
    return 0 <= i < len(text) and (text[i].isalnum() or text[i] in "_-")


def find_all(needle: str, haystack: str, ignore_case: bool = False) -> list[int]:
    """Start offsets of `needle` as a whole word (not inside a longer word) in `haystack`."""
    if ignore_case:
        return [m.start() for m in _whole_word(needle, True).finditer(haystack)]
    out, i = [], haystack.find(needle)
    while i >= 0 and needle:  # str.find, not a regex: compiling one per candidate made the build 5x slower
        if not _word_char(haystack, i - 1) and not _word_char(haystack, i + len(needle)):
            out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of running text: a split after . ! ? before a capital or digit, not after an abbreviation."""
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        words = text[start : m.start()].split()
        last = words[-1].rstrip(".!?\"')]").lower() if words else ""
        if last in _ABBREVIATIONS or len(last) == 1 or _INITIALISM.fullmatch(words[-1] if words else ""):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def _record(qid: str, context: str, question: str, answer: str, starts: list[int], **extra) -> dict:
    assert starts and all(context[s : s + len(answer)] == answer for s in starts), qid
    return {"id": qid, "context": context, "question": question,
            "answers": {"text": [answer] * len(starts), "answer_start": starts}, **extra}


# ----------------------------------------------------------------------------------------------- conll-cloze


def conll_mentions(sentence) -> list[tuple[int, int]]:
    """(start, end) token spans of the named entities of a CoNLL sentence (IOB1 or IOB2 tags)."""
    spans: list[list[int]] = []
    previous = "O"
    for i, row in enumerate(sentence):
        tag = row[3]
        if tag == "O":
            previous = "O"
            continue
        if tag.startswith("B-") or previous == "O" or previous[2:] != tag[2:]:
            spans.append([i, i + 1])
        else:
            spans[-1][1] = i + 1
        previous = tag
    return [(a, b) for a, b in spans]


def _is_prose(words: list[str]) -> bool:
    # Result tables ("Sheffield Wednesday 3 Leeds 2") have entities but no sentence to reason over.
    return len(words) >= 6 and sum(w.isalpha() and w.islower() for w in words) >= 3


def conll_cloze(conll: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for split in SPLITS:
        for di, doc in enumerate(conll.get(split, [])):
            k, n_words = 0, 0
            while k < len(doc) and n_words < CONLL_PASSAGE_MIN_WORDS:
                n_words += len(doc[k])
                k += 1
            passage = " ".join(detokenize([r[0] for r in s]) for s in doc[:k])
            candidates = []
            for si in range(k, len(doc)):
                words = [r[0] for r in doc[si]]
                if not _is_prose(words):
                    continue
                spans = conll_mentions(doc[si])
                strings = Counter(detokenize(words[a:b]) for a, b in spans)
                for a, b in spans:
                    answer = detokenize(words[a:b])
                    question = detokenize(words[:a] + [PLACEHOLDER] + words[b:])
                    starts = find_all(answer, passage)
                    if strings[answer] == 1 and starts and not find_all(answer, question):
                        candidates.append(_record(f"conll-{split}-d{di}-s{si}-t{a}", passage, question, answer,
                                                  starts))
            if len(candidates) > CONLL_MAX_PER_DOCUMENT:
                keep = _rng("conll-cloze", split, str(di)).choice(len(candidates), CONLL_MAX_PER_DOCUMENT,
                                                                  replace=False)
                candidates = [candidates[i] for i in sorted(keep)]
            out[split] += candidates
    return out


# ----------------------------------------------------------------------------------------------- wiki-cloze


def _cloze_candidates(sentence: str, passage: str) -> list[tuple[int, int, str]]:
    """(rank, start, text): 0 a multi-word capitalised name, 1 a one-word name, 2 a content word; each occurring
    exactly once in the sentence and at least once in the passage."""
    found = []
    for m in _NAME.finditer(sentence):
        start, text = m.start(), m.group(0)
        first = text.split()[0]
        if start == 0 and first.lower() in STOPWORDS:  # "The Roman Empire" at a sentence start: drop "The"
            rest = text[len(first):].lstrip()
            start, text = m.end() - len(rest), rest
        text = text.removesuffix("'s")
        if not text or text.lower() in STOPWORDS or (start == 0 and " " not in text):
            continue  # a lone sentence-initial capital says nothing about being a name
        found.append((0 if " " in text else 1, start, text))
    found += [(2, m.start(), m.group(0)) for m in _WORD.finditer(sentence)
              if m.group(0)[0].islower() and m.group(0) not in STOPWORDS]
    # Whole words only (not "known" inside "well-known"), and exactly one of them, so the blank is unambiguous.
    return [(r, s, t) for r, s, t in found if find_all(t, sentence) == [s] and find_all(t, passage)]


def wiki_cloze(wiki: list[dict], split_of: dict[str, str]) -> tuple[dict[str, list[dict]], Counter]:
    # Document frequency over train leads only: the rarest content word is the most specific one to blank out.
    df: Counter = Counter()
    for a in wiki:
        if split_of[a["title"]] == "train":
            df.update({w.lower() for w in _WORD.findall(a["extract"])})
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    kinds: Counter = Counter()
    for a in wiki:
        sentences = split_sentences(a["extract"].strip())
        if len(sentences) < 2:
            continue
        candidates = []
        for i, sentence in enumerate(sentences):
            passage = " ".join(sentences[:i] + sentences[i + 1 :])
            candidates += [(rank, df[text.lower()] if rank == 2 else 0, i, start, text)
                           for rank, start, text in _cloze_candidates(sentence, passage)]
        if not candidates:
            continue
        best = min(c[:2] for c in candidates)
        pool = [c for c in candidates if c[:2] == best]
        rank, _, i, start, text = pool[int(_rng("wiki-cloze", a["title"]).integers(len(pool)))]
        passage = " ".join(sentences[:i] + sentences[i + 1 :])
        question = sentences[i][:start] + PLACEHOLDER + sentences[i][start + len(text) :]
        kinds[("multi-word name", "one-word name", "content word")[rank]] += 1
        out[split_of[a["title"]]].append(_record(f"wikicloze-{stable_key(a['title'])[:12]}", passage, question, text,
                                                 find_all(text, passage), title=a["title"]))
    return out, kinds


# ----------------------------------------------------------------------------------------------- wiki-title-span


def _base_title(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)$", "", title).strip()  # "Bearing (mechanical)" -> "Bearing"


def wiki_title_span(wiki: list[dict], split_of: dict[str, str]) -> dict[str, list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for a in wiki:
        groups.setdefault((split_of[a["title"]], a["topic"]), []).append(a)
    for members in groups.values():  # sorted once (stable): each article's pool is its group without its title
        members.sort(key=lambda b: b["title"])
    titles = {key: [b["title"] for b in members] for key, members in groups.items()}
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for a in wiki:
        split, title, description = split_of[a["title"]], _base_title(a["title"]), a.get("description", "").strip()
        lead = a["extract"].strip()
        if not description or title.lower() in description.lower() or not find_all(title, lead, ignore_case=True):
            continue
        rng = _rng("wiki-title-span", a["title"])
        group, names = groups[(split, a["topic"])], titles[(split, a["topic"])]
        pool = group[: bisect_left(names, a["title"])] + group[bisect_right(names, a["title"]) :]
        distractors = []
        for j in rng.permutation(len(pool)):
            b = pool[j]
            if (b.get("description", "").strip().lower() != description.lower()
                    and not find_all(title, b["extract"], ignore_case=True)):
                distractors.append(b["extract"].strip())
            if len(distractors) == TITLE_SPAN_LEADS - 1:
                break
        if len(distractors) < TITLE_SPAN_LEADS - 1:
            continue
        at = int(rng.integers(TITLE_SPAN_LEADS))
        leads = distractors[:at] + [lead] + distractors[at:]
        offset = sum(len(x) + 2 for x in leads[:at])
        context = "\n\n".join(leads)
        mentions = [(offset + m.start(), m.group(0)) for m in _whole_word(title, True).finditer(lead)]
        answer = mentions[0][1]
        starts = [s for s, text in mentions if text == answer]  # the casing of the first mention
        out[split].append(_record(f"wikititle-{stable_key(a['title'])[:12]}", context,
                                  f'Which of these is described as "{description}"?', answer, starts,
                                  title=a["title"]))
    return out


# ----------------------------------------------------------------------------------------------- writing


DESCRIPTIONS = {
    "conll-cloze": (
        "Cloze QA over CoNLL-2003 news (ReCoRD manner): which entity of the passage fills @placeholder?",
        f"Passage: the shortest prefix of a document's sentences with >= {CONLL_PASSAGE_MIN_WORDS} tokens. "
        "Question: a later sentence of the same document with >= 6 tokens and >= 3 lower-case words (no result "
        "tables), one named-entity mention (gold NER tags) replaced by @placeholder; kept when that entity string "
        "occurs once in the sentence, nowhere else in the question and at least once (whole word) in the passage. "
        f"At most {CONLL_MAX_PER_DOCUMENT} questions per document (seeded choice). Split = the CoNLL file."),
    "wiki-cloze": (
        "Cloze QA over Wikipedia leads: which span of the lead fills @placeholder in the held-out sentence?",
        "Leads of >= 2 sentences. For each sentence, candidate answers occur exactly once in it and at least once "
        "(whole word) in the other sentences: multi-word capitalised names, else one-word names (not "
        "sentence-initial), else content words (not stopwords, >= 4 letters). The best kind present in the lead "
        "wins; among content words the rarest in the train leads (document frequency) wins; remaining ties are "
        "broken by a generator seeded with the title. Passage: the lead minus that sentence; question: the "
        "sentence with the answer replaced by @placeholder. One question per article; split = the article's."),
    "wiki-title-span": (
        "Which of three Wikipedia leads has this description? Answer: its title as written in that lead.",
        f"Passage: the article's lead and {TITLE_SPAN_LEADS - 1} distractor leads of the same topic and split "
        "(seeded choice; a distractor never contains the title, nor has the same description), in a seeded "
        "order, separated by blank lines. Question: 'Which of these is described as \"<description>\"?'. "
        "Answer: the title (a trailing parenthesis removed) as written in the article's own lead, matched "
        "case-insensitively as a whole word. Articles whose lead lacks the title, or whose description contains "
        "it, are skipped. One question per article; split = the article's."),
}


def _mean(values: list[int]) -> float:
    return round(float(np.mean(values)), 2) if values else 0.0


def qa_stats(name: str, splits: dict[str, list[dict]], extra: dict | None = None) -> dict:
    stats: dict = {"name": name, "family": "qa", "splits": {}, **(extra or {})}
    for split, examples in splits.items():
        lengths = Counter(min(len(ex["answers"]["text"][0].split()), 4) for ex in examples)
        stats["splits"][split] = {
            "examples": len(examples),
            "passages": len({ex["context"] for ex in examples}),
            "mean_passage_words": _mean([len(ex["context"].split()) for ex in examples]),
            "mean_question_words": _mean([len(ex["question"].split()) for ex in examples]),
            "answer_words": {("4+" if k == 4 else str(k)): lengths[k] for k in sorted(lengths)},
            "mean_answer_occurrences": _mean([len(ex["answers"]["answer_start"]) for ex in examples]),
        }
    return stats


def build_qa_tasks(raw: dict, root: Path) -> tuple[dict[str, dict], list[str]]:
    """Write every QA task under `root/<name>/` and return (stats per task, validation + test texts)."""
    all_stats, eval_texts = {}, set()
    for name in DESCRIPTIONS:
        stats, texts = build_qa_task(name, raw, root)
        all_stats.update(stats)
        eval_texts.update(texts)
    return all_stats, sorted(eval_texts)


def build_qa_task(name: str, raw: dict, root: Path,
                  before_write: Callable[[], None] = lambda: None) -> tuple[dict[str, dict], list[str]]:
    """Write the QA task `name` (a key of DESCRIPTIONS) under `root/<name>/`, calling `before_write()` first; return
    ({name: stats}, its validation and test passages and questions). Each task on its own, so that two processes
    can share them (jobs.py)."""
    if name == "conll-cloze":
        splits, extra = conll_cloze(raw["conll"]), {}
    else:
        split_of = raw["units"]["wikipedia"]
        wiki = sorted(raw["wiki"], key=lambda a: a["title"])  # output order must not depend on input order
        if name == "wiki-cloze":
            splits, kinds = wiki_cloze(wiki, split_of)
            extra = {"answer_kinds": dict(sorted(kinds.items()))}
        else:
            splits, extra = wiki_title_span(wiki, split_of), {}
    stats = qa_stats(name, splits, extra)
    description, construction = DESCRIPTIONS[name]
    before_write()
    write_task_folder(root, {"name": name, "family": "qa", "description": description,
                             "construction": construction, "recipe": RECIPE}, stats, splits=splits)
    texts = [text for split in ("validation", "test") for ex in splits[split] for text in (ex["context"],
                                                                                             ex["question"])]
    return {name: stats}, texts
