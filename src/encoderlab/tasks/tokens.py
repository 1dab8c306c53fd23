"""Token classification (TC): CoNLL-2003, OntoNotes 5, UNER in the paper; conll-ner/-chunk/-pos offline.

Labels belong to words; the model sees sub-words. Words are encoded as running text would be: every word after the
first gets its leading space (" " + word, `is_pretokenized=True`), so a byte-level BPE splits it exactly as in the
sentence " ".join(words) (measured on CoNLL-2003 validation with the offline tokenizer: 100% of sentences identical,
1.64 sub-words a word; encoding bare words gives 2.02 and matches running text in 0.5% of sentences). The sequence
is `<bos> sub-words <eos>` (protocol `inputs: eos`: `sub-words <eos>`), cut to `max_length`.

The protocol's `tokens` section chooses the labels, the head's dropout and the metric:
- `labels: first_subword` (encoderlab's): the first sub-word of each word carries the word's tag; other sub-words,
  specials and padding get -100; a word's prediction is the argmax at its first sub-word.
- `labels: all_subwords` (the authors'): every sub-word carries its word's tag (specials and padding -100); a word's
  prediction is the majority vote of its sub-words' argmax tags (`vote`).
- `dropout`: before the linear head, in training only (tasks/dropout.py: masks both engines draw alike).
- `metric`: seqeval entity F1 (token accuracy for plain tags), or the mean over sentences of scikit-learn's macro F1
  over the tags of each sentence (metrics.sentence_macro_f1). evaluate() reports both either way.
A word whose first sub-word was cut off by `max_length` is predicted as "O" (or, without an "O" tag, the most
frequent train tag) and still scored against its gold tag, so truncation can only lower the score, never inflate
it; `task.truncated[split]` counts such words. (The authors' code drops such words from their sentence instead;
at their max_length of ~2,000 tokens no CoNLL/OntoNotes/UNER sentence is cut, so the two agree there.)

Schemes (schemes.py): iob1, iob2 and bioes tags are scored with entity-level F1 (seqeval), plain tags (POS) with
token accuracy; a tag the scheme does not allow is refused. A validation/test tag unseen in train is an error for
plain tags. For chunk schemes the entity *type* must occur in train, but an individual tag need not: CoNLL-2003
chunking has two I-PRT tokens in validation and none in train (B-PRT is common). A model that never predicts I-PRT
still finds those chunks' beginnings; refusing the task would be worse.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.core.errors import DataError, listed, resolved
from encoderlab.core.io import read_jsonl, text_lines
from encoderlab.data.offline.taskfiles import read_task
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.base import SPLITS, ListTask, constant, linear_head, pad
from encoderlab.tasks.tag_files import tag_names_file
from encoderlab.tasks.common import (
    cached,
    check_splits,
    column,
    content_hash,
    eval_mode,
    holdout,
    load_hf_splits,
    pack_lists,
    unpack_lists,
)
from encoderlab.tasks.dropout import row_seeds, seeded_dropout
from encoderlab.tasks.metrics import entity_f1, sentence_macro_f1, token_accuracy
from encoderlab.tasks.schemes import SCHEMES, Scheme, derive, first_invalid, metric_of


class TokenTask(ListTask):
    family = "tokens"
    truncation_unit = "words"  # whose first sub-word was cut off

    def __init__(self, name: str, splits: dict[str, list[dict]], labels: list[str], scheme: Scheme | None,
                 *, plain_if_no_chunks: bool = False, fingerprint: str = "") -> None:
        """`scheme` None: the chunk scheme all sentences fit (`scheme_of`); when none fits, plain tags if
        `plain_if_no_chunks` (the offline suite's POS tags), else refused naming a tag."""
        if scheme is not None and scheme not in SCHEMES:
            raise DataError(f"task {name!r}: tag scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        self.name, self.fingerprint, self.labels = name, fingerprint, list(labels)
        check_splits(name, splits)
        self.splits = {s: list(splits[s]) for s in SPLITS}
        for s in SPLITS:
            for i, ex in enumerate(self.splits[s]):
                self._check(s, i, ex)
        self.scheme = scheme or scheme_of(self.splits, self.labels, f"task {name!r}", plain_if_no_chunks)
        self.metric = self.standard_metric = metric_of(self.scheme)
        self.label_mode, self.dropout = "first_subword", 0.0  # the protocol's `tokens` (apply_protocol)
        for s in SPLITS:
            for ex in self.splits[s]:
                if (invalid := first_invalid([self.labels[t] for t in ex["tags"]], self.scheme)) is not None:
                    j, why = invalid
                    raise DataError(f"{_where(ex, j, f'task {name!r}, {s}')}: tag {self.labels[ex['tags'][j]]!r} "
                                    f"is not valid under tag_scheme {self.scheme}: {why}")
        self._check_unseen()
        counts = Counter(t for ex in self.splits["train"] for t in ex["tags"])
        self.default_tag = (self.labels.index("O") if self.scheme != "plain" and "O" in self.labels
                            else min(counts, key=lambda t: (-counts[t], t)))  # predicted for words cut off
        self.ids: dict[str, list[list[int]]] = {}
        self.starts: dict[str, list[list[int]]] = {}  # position of each word's first sub-word, -1 if cut off
        self.truncated: dict[str, int] = {}  # words cut off by max_length, per split, after prepare()
        self.pad_id = 0

    def _check(self, split: str, i: int, ex: dict) -> None:
        where = f"task {self.name!r}, {split} example {i} (id {ex.get('id', '-')!r})"
        tokens, tags = ex.get("tokens"), ex.get("tags")
        if not isinstance(tokens, list) or not tokens:
            raise DataError(f"{where}: 'tokens' must be a non-empty list of words, got {tokens!r}")
        bad = next((j for j, w in enumerate(tokens) if not isinstance(w, str) or not w.strip()), None)
        if bad is not None:
            raise DataError(f"{where}: word {bad} is {tokens[bad]!r}; every word must be a non-empty string")
        if not isinstance(tags, list) or len(tags) != len(tokens):
            n = len(tags) if isinstance(tags, list) else tags
            raise DataError(f"{where}: {len(tokens)} tokens but tags {n!r}; one tag per token")
        bad = next((t for t in tags if not isinstance(t, int) or isinstance(t, bool)
                    or not 0 <= t < len(self.labels)), None)
        if bad is not None:
            raise DataError(f"{where}: tag {bad!r} is not an index in [0, {len(self.labels)}) of {self.labels}")

    def _check_unseen(self) -> None:
        seen = {t for ex in self.splits["train"] for t in ex["tags"]}
        kind = (lambda t: self.labels[t][2:] or "O") if self.scheme != "plain" else (lambda t: self.labels[t])
        seen_kinds = {kind(t) for t in seen}
        for split in ("validation", "test"):
            unseen = sorted({kind(t) for ex in self.splits[split] for t in ex["tags"]} - seen_kinds)
            if unseen:
                what = "entity types" if self.scheme != "plain" else "tags"
                raise DataError(f"task {self.name!r}: {what} in {split} not seen in train: {listed(unseen)} (the model "
                                "cannot learn them; fix the split or drop those sentences)")

    def truncation_totals(self) -> dict[str, int]:
        return {s: sum(len(ex["tokens"]) for ex in self.splits[s]) for s in self.truncated}  # words

    def apply_protocol(self, protocol) -> None:
        super().apply_protocol(protocol)
        self.label_mode, self.dropout = protocol.tokens.labels, protocol.tokens.dropout
        self.metric = "sentence_macro_f1" if protocol.tokens.metric == "sentence_macro_f1" else self.standard_metric

    # ---- tokenisation

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        self._refuse_once_built("prepare")
        if max_length < 3:
            raise DataError(f"max_length={max_length} is too small for task {self.name!r}: at least 3")
        self.pad_id = tokenizer.pad_id
        data = content_hash([ex["tokens"] for s in SPLITS for ex in self.splits[s]])
        kind = "tokens" if self.inputs == "bos_eos" else f"tokens-{self.inputs}"  # bos_eos: the caches made before
        state = cached(cache_dir, kind, self.name, tokenizer, max_length, data,
                       lambda: self._encode_all(tokenizer, max_length))
        self.ids = {s: unpack_lists(state[s]) for s in SPLITS}
        self.starts = {s: unpack_lists(state[f"starts_{s}"]) for s in SPLITS}
        self.truncated = {s: int(state[f"truncated_{s}"]) for s in SPLITS}

    def _encode_all(self, tokenizer: TextTokenizer, max_length: int) -> dict[str, Tensor]:
        encoded = {s: self._encode(tokenizer, max_length, s) for s in SPLITS}
        return {**{s: pack_lists(ids) for s, (ids, _, _) in encoded.items()},
                **{f"starts_{s}": pack_lists(starts) for s, (_, starts, _) in encoded.items()},
                **{f"truncated_{s}": torch.tensor(cut) for s, (_, _, cut) in encoded.items()}}

    def _encode(self, tokenizer: TextTokenizer, max_length: int,
                split: str) -> tuple[list[list[int]], list[list[int]], int]:
        words = [[w if j == 0 else " " + w for j, w in enumerate(ex["tokens"])] for ex in self.splits[split]]
        encodings = tokenizer.tokenizer.encode_batch(words, is_pretokenized=True, add_special_tokens=False)
        front = len(self.framed([], tokenizer.bos_id, tokenizer.eos_id)) - 1  # 1 with <bos>, 0 without
        keep = max_length - front - 1
        ids, starts, cut = [], [], 0
        for enc, ws in zip(encodings, words):
            first = [-1] * len(ws)
            for pos, w in enumerate(enc.word_ids[:keep]):
                if w is not None and first[w] < 0:
                    first[w] = pos + front
            ids.append(self.framed(enc.ids[:keep], tokenizer.bos_id, tokenizer.eos_id))
            starts.append(first)
            cut += sum(p < 0 for p in first)
        return ids, starts, cut

    # ---- model

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        return linear_head(hidden_size, len(self.labels), generator)

    def word_spans(self, split: str, index: int) -> list[tuple[int, int]]:
        """Positions [start, end) of each word's sub-words in example `index` ((-1, -1) for a word cut off). A
        word's sub-words are contiguous and end where the next kept word starts, or at <eos>."""
        starts, end = self.starts[split][index], len(self.ids[split][index]) - 1
        ends = [*[p if p >= 0 else end for p in starts[1:]], end]
        return [(p, e) if p >= 0 else (-1, -1) for p, e in zip(starts, ends)]

    def sub_word_labels(self, split: str, index: int, length: int) -> list[int]:
        """Training labels of one example padded to `length`: the word's tag at its first sub-word (all_subwords:
        at every sub-word), -100 elsewhere (specials, padding, the other sub-words)."""
        labels = [-100] * length
        for (a, b), t in zip(self.word_spans(split, index), self.splits[split][index]["tags"]):
            if a >= 0:
                stop = b if self.label_mode == "all_subwords" else a + 1
                labels[a:stop] = [t] * (stop - a)
        return labels

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        seqs = self._prepared("train")
        for n, batch in enumerate(self.batch_indices([len(s) for s in seqs], batch_size, seed)):
            input_ids, mask = pad([seqs[i] for i in batch], self.pad_id)
            labels = torch.tensor([self.sub_word_labels("train", i, input_ids.shape[1]) for i in batch])
            out = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
            if self.dropout > 0:  # the batch carries its dropout masks' seeds, so both engines draw the same masks
                out["dropout_seed"] = row_seeds(seed, n, len(batch))
            yield out

    def logits(self, backbone: Transformer, head: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = backbone(input_ids, causal=False, attention_mask=attention_mask)  # (B, T, C)
        return head(hidden.to(next(head.parameters()).dtype))  # (B, T, num_tags)

    def loss(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        if "dropout_seed" in batch:  # training with the protocol's dropout before the head
            hidden = backbone(batch["input_ids"], causal=False, attention_mask=batch["attention_mask"])
            hidden = seeded_dropout(hidden.to(next(head.parameters()).dtype), batch["dropout_seed"], self.dropout)
            logits = head(hidden)
        else:
            logits = self.logits(backbone, head, batch["input_ids"], batch["attention_mask"])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=-100)

    def predict(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> list[list[int]]:
        """Predicted tag index of every word of `split` (the default tag for words cut off by max_length)."""
        seqs = self._prepared(split)
        device = next(backbone.parameters()).device
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        preds: list[list[int]] = [[] for _ in seqs]
        with torch.no_grad(), eval_mode(backbone, head):
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                input_ids, mask = pad([seqs[i] for i in batch], self.pad_id)
                best = self.logits(backbone, head, input_ids.to(device), mask.to(device)).argmax(-1).tolist()
                for i, row in zip(batch, best):
                    if self.label_mode == "all_subwords":
                        spans = self.word_spans(split, i)
                        preds[i] = [vote(row[a:b]) if a >= 0 else self.default_tag for a, b in spans]
                    else:
                        preds[i] = [row[p] if p >= 0 else self.default_tag for p in self.starts[split][i]]
        return preds

    def evaluate(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        preds = self.predict(backbone, head, split, batch_size)
        every = [t for sentence in preds for t in sentence]
        return {**self._scores(preds, split), **constant(every, lambda t: f"{self.labels[t]!r} for every word")}

    def _scores(self, preds: Sequence[Sequence[int]], split: str) -> dict[str, float]:
        """"score" (the protocol's metric), "standard" (entity F1; token accuracy for plain tags) and every metric
        by name: f1/precision/recall (entity level, chunk schemes), accuracy, sentence_macro_f1."""
        names = [[self.labels[t] for t in s] for s in preds]
        gold = [[self.labels[t] for t in ex["tags"]] for ex in self.splits[split]]
        out = {"accuracy": token_accuracy(names, gold),
               "sentence_macro_f1": sentence_macro_f1(preds, [ex["tags"] for ex in self.splits[split]])}
        if self.scheme != "plain":
            m = entity_f1(names, gold)
            out = {"f1": m["f1"], "precision": m["precision"], "recall": m["recall"], **out}
        standard = out["f1" if self.scheme != "plain" else "accuracy"]
        return {"score": out["sentence_macro_f1"] if self.metric == "sentence_macro_f1" else standard,
                "standard": standard, **out}

    def trivial_baseline(self, split: str) -> dict[str, float]:
        """All "O" (entity F1 0) for chunk schemes; the most frequent train tag for plain tags."""
        return self._scores([[self.default_tag] * len(ex["tags"]) for ex in self.splits[split]], split)


def vote(tags: Sequence[int]) -> int:
    """The majority tag of a word's sub-words, in the authors' own expression: `max(set(tags), key=tags.count)`.
    A tie goes to the tied tag the set yields first. For ints that order depends only on the list (an int's hash is
    itself, never randomised): the lowest id when every tag is below 8, otherwise slot order (id mod the table size,
    then collisions). Deterministic, and the authors' tie rule exactly because it is their expression."""
    tags = list(tags)
    return max(set(tags), key=tags.count)


def _where(ex: dict, j: int, task: str) -> str:
    """Where word `j` of an example is: its file and line when read from a CoNLL file, else its id."""
    if "source" in ex:
        return f"{ex['source'][0]}: line {ex['source'][1] + j}"
    return f"{task} example {ex['id']!r}, word {j}"


def scheme_of(splits: dict[str, list[dict]], labels: list[str], task: str, plain_if_no_chunks: bool) -> str:
    """The chunk scheme every sentence fits (schemes.derive); plain when none does and `plain_if_no_chunks`, else
    refused naming a tag that fits no chunk scheme."""
    examples = [ex for s in SPLITS for ex in splits[s]]
    scheme = derive([labels[t] for t in ex["tags"]] for ex in examples)
    if scheme is not None or plain_if_no_chunks:
        return scheme or "plain"
    ex, (j, why) = next((ex, bad) for ex in examples
                        if (bad := first_invalid([labels[t] for t in ex["tags"]], "iob1")) is not None)
    raise DataError(f"{_where(ex, j, task)}: tag {labels[ex['tags'][j]]!r} fits none of iob1, iob2, bioes ({why}); "
                    "declare tag_scheme: plain to score token accuracy, or fix the tag")


# ---------------------------------------------------------------------------------------- loaders


def load_offline_tokens(root: Path, name: str, *, fingerprint: str = "") -> TokenTask:
    folder, meta = read_task(root, name, "tokens")
    splits = {s: list(read_jsonl(folder / f"{s}.jsonl")) for s in SPLITS}
    return TokenTask(name, splits, meta["labels"], meta.get("scheme"), plain_if_no_chunks=True,
                     fingerprint=fingerprint)


CONLL_HUB = {  # the authors' copies (docs/paper.md), hub id and config. hgissbkh/ontonotes5 is a loading script, which
    "conll2003": ("hgissbkh/conll2003-en", None),  # datasets>=4 refuses: use a local copy in the same schema there.
    "ontonotes": ("hgissbkh/ontonotes5", None),
    "uner": ("hgissbkh/uner_en", None),
}


def load_conll_like(kind: Literal["conll2003", "ontonotes", "uner"], source: str | None = None,
                    label_names: list[str] | None = None, *, fingerprint: str = "") -> TokenTask:
    """CoNLL-2003-schema NER (`tokens`, `ner_tags` ints; `tags`, or `words` and `ner`, as in the authors' copies,
    are accepted) from the hub or a local folder of train/validation/test files. Tag names come from `label_names`,
    else the ClassLabel names of the dataset's features, else a `labels.json` (list, or {name: id}) or `labels.txt`
    (one a line) in the folder.
    """
    if kind not in CONLL_HUB:
        raise DataError(f"token task must be one of {sorted(CONLL_HUB)}, got {kind!r}")
    hub, config = CONLL_HUB[kind]
    schema = ("train, validation, test as .jsonl/.json/.parquet with columns tokens (list of words) and ner_tags "
              "(list of ints); tag names in labels.json / labels.txt or label_names=")
    ds = load_hf_splits(source or hub, config, {"train": ("train",), "validation": ("validation", "valid", "dev"),
                                                "test": ("test",)}, schema)
    cols = ds["train"].column_names
    tag_col = next((c for c in ("ner_tags", "tags", "ner") if c in cols), "ner_tags")  # hgissbkh/conll2003-en: ner
    word_col = "words" if "words" in cols and "tokens" not in cols else "tokens"  # and words
    feature = getattr(ds["train"].features.get(tag_col), "feature", None)
    names = label_names or getattr(feature, "names", None) or (tag_names_file(Path(source)) if source else None)
    if not names:
        raise DataError(f"{kind} ({source or hub}): no tag names; pass label_names=[...] or put labels.json / "
                        "labels.txt next to the split files")
    splits = {}
    for split, d in ds.items():
        where = f"{kind} {split} ({source or hub})"
        splits[split] = [{"id": f"{split}-{i}", "tokens": list(t), "tags": list(y)}
                         for i, (t, y) in enumerate(zip(column(d, word_col, where), column(d, tag_col, where)))]
    return TokenTask(kind, splits, list(names), None, fingerprint=fingerprint)


def read_conll(path: str | Path, word_column: int = 0, tag_column: int = -1) -> list[tuple[list[str], list[str], int]]:
    """Sentences of a CoNLL column file, each (words, tags, line of its first word): whitespace-separated columns,
    blank lines between sentences, `-DOCSTART-` lines skipped."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"file not found: {resolved(path)}")
    sentences: list[tuple[list[str], list[str], int]] = []
    words: list[str] = []
    tags: list[str] = []
    n = 0
    for n, line in enumerate(text_lines(path), 1):
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if words:
                sentences.append((words, tags, n - len(words)))
            words, tags = [], []
            continue
        if not (-len(cols) <= word_column < len(cols) and -len(cols) <= tag_column < len(cols)):
            raise DataError(f"{path}: line {n} has {len(cols)} column(s) {cols}; word_column={word_column} "
                            f"and tag_column={tag_column} must both index them")
        if word_column % len(cols) == tag_column % len(cols):  # a line without its tag: the word would be its own tag
            raise DataError(f"{path}: line {n} has {len(cols)} column(s) {cols}: word_column={word_column} and "
                            f"tag_column={tag_column} are both column {word_column % len(cols)}; every word line "
                            "needs a word and a tag column")
        words.append(cols[word_column])
        tags.append(cols[tag_column])
    if words:
        sentences.append((words, tags, n + 1 - len(words)))
    if not sentences:
        raise DataError(f"{path}: no sentence found (blank lines separate sentences, one word a line)")
    return sentences


def load_conll_columns(train: str, validation: str, test: str | None, word_column: int = 0, tag_column: int = -1,
                       name: str | None = None, scheme: Scheme | None = None, *, fingerprint: str = ""
                       ) -> TokenTask:
    """A user's CoNLL column files. Tag names are the sorted tags of all files (a validation/test tag unseen in
    train is then reported by TokenTask); the scheme, unless given, is the chunk scheme all tags fit (a tag that
    fits none is refused: declare "plain" for tags without chunks). Without a test file, validation becomes the
    test set and 5% of train (seeded) the validation set."""
    files = {"train": train, "validation": validation, "test": test}
    raw = {s: read_conll(f, word_column, tag_column) for s, f in files.items() if f is not None}
    names = sorted({t for sents in raw.values() for _, tags, _ in sents for t in tags})
    index = {t: i for i, t in enumerate(names)}
    splits = {s: [{"id": f"{s}-{i}", "tokens": w, "tags": [index[t] for t in tags], "source": (files[s], line)}
                  for i, (w, tags, line) in enumerate(sents)] for s, sents in raw.items()}
    if test is None:
        splits["test"] = splits["validation"]
        splits["train"], splits["validation"] = holdout(splits["train"])
    stem = Path(train).stem
    return TokenTask(name or (Path(train).parent.name if stem == "train" else stem), splits, names, scheme,
                     fingerprint=fingerprint)
