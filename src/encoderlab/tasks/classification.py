"""Sequence classification (SC): SST-2, MNLI, QQP in the paper; rt-polarity, imdb-polarity, wiki-topic offline.

A text becomes `<bos> text <eos>`, a pair `<bos> a <eos> b <eos>` (`sentence_pairs: segments`) or, as the
authors' code writes it (`labelled`), one text named by its fields: `"Premise: a\nHypothesis: b"`, `"Question 1:
a\nQuestion 2: b"` (`field_label`). With the protocol's `inputs: eos` (the authors') there is no BOS: `text <eos>`,
`a <eos> b <eos>`. Texts longer than `max_length` are cut at the end, the final EOS kept; in a two-segment pair the
longer text is cut first, so that both keep as much as they can (`fit_pair`). The head reads the mean of the last
hidden states over the non-padding tokens (EOS included): one `Linear(hidden, num_labels)` (`classification_head:
linear`), or `Linear(hidden, hidden) -> GELU -> Linear(hidden, num_labels)` (`dense_gelu`, the authors'). The loss
is cross-entropy; the score is accuracy, the field's standard metric too (macro-F1 is reported beside it).

Splits where the test labels are not public (all of GLUE): the official validation set is the test set and 5% of
train becomes the validation set that picks the learning rate (docs/paper.md; the protocol's `holdout` says how it
is drawn: common.split_validation).
A user dataset without a test file is treated the same way.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.core.errors import DataError, listed
from encoderlab.core.io import read_jsonl
from encoderlab.data.offline.taskfiles import read_task
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.base import SPLITS, ListTask, constant, linear_head, mean_pool, pad
from encoderlab.tasks.common import (
    cached,
    check_splits,
    column,
    content_hash,
    eval_mode,
    load_hf_splits,
    pack_lists,
    read_table,
    split_validation,
    unpack_lists,
)
from encoderlab.tasks.label_names import NUMBER, label_name
from encoderlab.tasks.metrics import accuracy, macro_f1

# ---------------------------------------------------------------------------------------- the task


class ClassificationTask(ListTask):
    family = "classification"
    metric = standard_metric = "accuracy"
    classification_head = "linear"  # the protocol's (apply_protocol): linear or dense_gelu
    truncation_unit = "examples"

    def __init__(self, name: str, splits: dict[str, list[dict]], labels: list[str],
                 text_fields: tuple[str, ...] = ("text",), *, fingerprint: str = "") -> None:
        self.name, self.fingerprint = name, fingerprint
        self.labels, self.text_fields = list(labels), tuple(text_fields)
        if len(self.text_fields) not in (1, 2):
            raise DataError(f"task {name!r}: text_fields={list(text_fields)}; one field (a text) or two (a pair)")
        check_splits(name, splits)
        self.splits = {s: list(splits[s]) for s in SPLITS}
        self.gold = {s: [self._check(s, i, ex) for i, ex in enumerate(self.splits[s])] for s in SPLITS}
        seen = set(self.gold["train"])
        if len(seen) < 2:  # every prediction would be that class: 100% accuracy, learned or not
            raise DataError(f"task {name!r}: every train example has the label {self.labels[min(seen)]!r}; a "
                            "classification task needs at least two classes in train")
        for split in ("validation", "test"):
            unseen = sorted(set(self.gold[split]) - seen)
            if unseen:
                raise DataError(f"task {name!r}: labels in {split} not seen in train: "
                                f"{listed(self.labels[y] for y in unseen)} (a class the model never trains on "
                                "cannot be learned; fix the split or drop those examples)")
        self.sentence_pairs = "segments"  # the protocol's choice, set before prepare(): segments or labelled
        self.ids: dict[str, list[list[int]]] = {}
        self.pad_id = 0  # the tokenizer's, from prepare(); padding is masked out of attention, pooling and loss
        self.truncated: dict[str, int] = {}  # examples cut to max_length, per split, after prepare()
        self.dropped: dict[str, int] = {}  # rows a loader left out (GLUE: empty texts), per source split

    def apply_protocol(self, protocol) -> None:
        super().apply_protocol(protocol)
        self.sentence_pairs, self.classification_head = protocol.sentence_pairs, protocol.classification_head

    def _check(self, split: str, i: int, ex: dict) -> int:
        where = f"task {self.name!r}, {split} example {i} (id {ex.get('id', '-')!r})"
        for f in self.text_fields:
            if f not in ex:
                raise DataError(f"{where}: no text field {f!r}; the example has {sorted(ex)}")
            if not isinstance(ex[f], str) or not ex[f].strip():
                raise DataError(f"{where}: text field {f!r} must be a non-empty string, got {ex[f]!r}")
        y = ex.get("label")
        if not isinstance(y, int) or isinstance(y, bool) or not 0 <= y < len(self.labels):
            raise DataError(f"{where}: label must be an int in [0, {len(self.labels)}) indexing {self.labels}, "
                            f"got {y!r}")
        return y

    # ---- tokenisation

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        self._refuse_once_built("prepare")
        segments = len(self._texts("train"))
        # the special tokens, a token of each segment and the EOS that ends the first of two
        need = len(self.framed([], tokenizer.bos_id, tokenizer.eos_id)) + 2 * segments - 1
        if max_length < need:
            raise DataError(f"max_length={max_length} is too small for task {self.name!r}: at least {need}")
        self.pad_id = tokenizer.pad_id
        # `inputs` changes the ids but not the texts: it is part of the key, or another setting's ids would be reused
        data = content_hash([self._texts(s) for s in SPLITS]) + ("" if self.inputs == "bos_eos" else self.inputs)
        state = cached(cache_dir, "classification", self.name, tokenizer, max_length, data,
                       lambda: self._encode_all(tokenizer, max_length))
        self.ids = {s: unpack_lists(state[s]) for s in SPLITS}
        self.truncated = {s: int(state[f"truncated_{s}"]) for s in SPLITS}

    def _encode_all(self, tokenizer: TextTokenizer, max_length: int) -> dict[str, Tensor]:
        encoded = {s: self._encode(tokenizer, max_length, s) for s in SPLITS}
        return {**{s: pack_lists(ids) for s, (ids, _) in encoded.items()},
                **{f"truncated_{s}": torch.tensor(cut) for s, (_, cut) in encoded.items()}}

    def _encode(self, tokenizer: TextTokenizer, max_length: int, split: str) -> tuple[list[list[int]], int]:
        # The authors' code appends EOS to the text and then truncates, so a text longer than max_length loses its
        # EOS; here the text is cut and EOS kept. At their max_length (2,028) no GLUE example is that long.
        bos, eos = tokenizer.bos_id, tokenizer.eos_id
        budget = max_length - len(self.framed([], bos, eos))
        fields = [tokenizer.encode_batch(texts) for texts in self._texts(split)]
        out, cut = [], 0
        if len(fields) == 1:
            for a in fields[0]:
                cut += len(a) > budget
                out.append(self.framed(a[:budget], bos, eos))
        else:  # `<bos> a <eos> b <eos>`, or `a <eos> b <eos>` with inputs: eos (each segment ends in EOS)
            for a, b in zip(*fields):
                la, lb = fit_pair(len(a), len(b), budget - 1)
                cut += (la, lb) != (len(a), len(b))
                out.append(self.framed([*a[:la], eos, *b[:lb]], bos, eos))
        return out, cut

    def _texts(self, split: str) -> list[list[str]]:
        """The texts of a split, one list per input segment: one per text field, or one labelled text per pair."""
        rows = self.splits[split]
        if len(self.text_fields) == 2 and self.sentence_pairs == "labelled":
            (a, b), (la, lb) = self.text_fields, (field_label(f) for f in self.text_fields)
            return [[f"{la}: {ex[a]}\n{lb}: {ex[b]}" for ex in rows]]
        return [[ex[f] for ex in rows] for f in self.text_fields]

    def _subsampled(self, split: str, keep: list[int]) -> None:
        self.gold[split] = [self.gold[split][i] for i in keep]

    # ---- model

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        if self.classification_head == "dense_gelu":
            return dense_gelu_head(hidden_size, len(self.labels), generator)
        return linear_head(hidden_size, len(self.labels), generator)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        seqs, gold = self._prepared("train"), self.gold["train"]
        for batch in self.batch_indices([len(s) for s in seqs], batch_size, seed):
            input_ids, mask = pad([seqs[i] for i in batch], self.pad_id)
            yield {"input_ids": input_ids, "attention_mask": mask, "labels": torch.tensor([gold[i] for i in batch])}

    def logits(self, backbone: Transformer, head: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = backbone(input_ids, causal=False, attention_mask=attention_mask)  # (B, T, C)
        pooled = mean_pool(hidden.float(), attention_mask)  # (B, C), padding excluded; summed in fp32 under bf16
        return head(pooled.to(next(head.parameters()).dtype))  # (B, num_labels)

    def loss(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        logits = self.logits(backbone, head, batch["input_ids"], batch["attention_mask"])
        return F.cross_entropy(logits.float(), batch["labels"])

    def predict(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> list[int]:
        """Predicted label of every example of `split`, in order (batches of similar lengths, no gradient)."""
        seqs = self._prepared(split)
        device = next(backbone.parameters()).device
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        preds = [0] * len(seqs)
        with torch.no_grad(), eval_mode(backbone, head):
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                input_ids, mask = pad([seqs[i] for i in batch], self.pad_id)
                out = self.logits(backbone, head, input_ids.to(device), mask.to(device)).argmax(-1).tolist()
                for i, p in zip(batch, out):
                    preds[i] = p
        return preds

    def evaluate(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        preds = self.predict(backbone, head, split, batch_size)
        return {**self.score_predictions(preds, split), **constant(preds, lambda y: f"class {self.labels[y]!r}")}

    def score_predictions(self, preds: Sequence[int], split: str) -> dict[str, float]:
        acc, f1 = accuracy(preds, self.gold[split]), macro_f1(preds, self.gold[split], len(self.labels))
        return {"score": acc, "standard": acc, "accuracy": acc, "macro_f1": f1}

    def majority_label(self) -> int:
        """The most frequent train label (the smallest index among ties)."""
        counts = Counter(self.gold["train"])
        return min(counts, key=lambda y: (-counts[y], y))

    def trivial_baseline(self, split: str) -> dict[str, float]:
        return self.score_predictions([self.majority_label()] * len(self.gold[split]), split)


def dense_gelu_head(hidden_size: int, outputs: int, generator: torch.Generator) -> nn.Sequential:
    """Linear(h, h) -> GELU -> Linear(h, outputs) on the pooled vector: the authors' head, which is transformers'
    EuroBertForSequenceClassification's (`dense`, `activation`, `classifier`): exact (erf) GELU, no dropout.
    Initialised as transformers initialises it (normal(0, 0.02) weights, zero biases), drawn from the run's
    generator, the dense layer first."""
    return nn.Sequential(linear_head(hidden_size, hidden_size, generator), nn.GELU(),
                         linear_head(hidden_size, outputs, generator))


def field_label(field: str) -> str:
    """How the authors' code names a text field in a labelled pair: `premise` -> `Premise`, `question1` ->
    `Question 1`."""
    words = re.sub(r"(?<=[A-Za-z])(?=\d)", " ", field.replace("_", " "))
    return words[:1].upper() + words[1:]


def fit_pair(la: int, lb: int, budget: int) -> tuple[int, int]:
    """Lengths that fit a pair into `budget` tokens by cutting the longer text first (HF's "longest_first")."""
    if la + lb <= budget:
        return la, lb
    half = budget // 2
    if la <= half:
        return la, budget - la
    if lb <= half:
        return budget - lb, lb
    return budget - half, half


def load_offline_classification(root: Path, name: str, *, fingerprint: str = "") -> ClassificationTask:
    folder, meta = read_task(root, name, "classification")
    splits = {s: list(read_jsonl(folder / f"{s}.jsonl")) for s in SPLITS}
    return ClassificationTask(name, splits, meta["labels"], tuple(meta.get("text_fields", ["text"])),
                              fingerprint=fingerprint)


GLUE_HUB = "nyu-mll/glue"
GLUE = {  # text columns, label names (used when the files carry no ClassLabel names)
    "sst2": (("sentence",), ["negative", "positive"]),
    "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]),
    "qqp": (("question1", "question2"), ["not_duplicate", "duplicate"]),
}


def load_glue(task: Literal["sst2", "mnli", "qqp"], source: str | None = None,
              holdout: str = "encoderlab", *, fingerprint: str = "") -> ClassificationTask:
    """SST-2, MNLI or QQP from the hub (`nyu-mll/glue`) or a local folder in the GLUE schema.

    GLUE's test labels are hidden, so the official validation set (MNLI: validation_matched) is the test set and
    5% of train is held out as validation (`holdout`: common.split_validation). Rows with an empty text are
    dropped (QQP has a few); `task.dropped` counts them per split.
    """
    if task not in GLUE:
        raise DataError(f"GLUE task must be one of {sorted(GLUE)}, got {task!r}")
    fields, default_names = GLUE[task]
    official = ("validation_matched", "validation") if task == "mnli" else ("validation",)
    schema = (f"train and {official[0]} as .jsonl/.csv/.tsv/.parquet with columns {', '.join(fields)}, label")
    ds = load_hf_splits(source or GLUE_HUB, task, {"train": ("train",), "official": official}, schema)
    feature = ds["train"].features.get("label")
    names = list(getattr(feature, "names", None) or default_names)
    rows = {}
    for split, d in ds.items():
        where = f"GLUE {task} {split} ({source or GLUE_HUB})"
        texts = [column(d, f, where) for f in fields]
        labels = [names.index(y) if isinstance(y, str) and y in names else y for y in column(d, "label", where)]
        rows[split] = [{"id": f"{split}-{i}", **dict(zip(fields, t)), "label": y}
                       for i, (y, *t) in enumerate(zip(labels, *texts))]

    def kept(part: list[dict]) -> list[dict]:
        return [r for r in part if all(isinstance(r[f], str) and r[f].strip() for f in fields)]

    # The authors split every train row; encoderlab's own holdout draws from the rows it keeps.
    parts = split_validation(rows["train"], holdout) if holdout == "train_test_split" else \
        split_validation(kept(rows["train"]), holdout)
    train, validation = (kept(part) for part in parts)
    out = ClassificationTask(task, {"train": train, "validation": validation, "test": kept(rows["official"])}, names,
                             fields, fingerprint=fingerprint)
    out.dropped = {split: len(part) - len(kept(part)) for split, part in rows.items()}
    return out


def load_user_classification(train: str, validation: str, test: str | None, text_column: str | list[str],
                             label_column: str, name: str | None = None,
                             holdout: str = "encoderlab", *, fingerprint: str = "") -> ClassificationTask:
    """A user's CSV/TSV/JSONL files. Labels may be strings or numbers, not both: the distinct train labels, sorted
    (numerically when all are integers), become classes 0..K-1. Without a test file, validation becomes the test set
    and 5% of train (`holdout`: common.split_validation) the validation set. A train class that no evaluation file
    has is kept, and said (`task.notes`)."""
    fields = (text_column,) if isinstance(text_column, str) else tuple(text_column)
    files = {"train": train, "validation": validation, "test": test}
    raw = {s: read_table(f) for s, f in files.items() if f is not None}
    for split, rows in raw.items():
        for i, row in enumerate(rows):
            _check_row(files[split], i, row, fields, label_column)

    names = _class_names(raw["train"], label_column, train)
    index = {v: i for i, v in enumerate(names)}
    splits, evaluated = {}, set()
    for split, rows in raw.items():
        found = {label_name(r[label_column]) for r in rows}
        if unseen := sorted(found - index.keys()):
            raise DataError(f"{files[split]}: labels in {split} not seen in train: {listed(unseen)}; train has "
                            f"{listed(names)} (column {label_column!r}: is it the label column?)")
        evaluated |= found if split != "train" else set()
        splits[split] = [{"id": f"{split}-{i}", **{f: r[f] for f in fields},
                          "label": index[label_name(r[label_column])]} for i, r in enumerate(rows)]
    if test is None:
        splits["test"] = splits["validation"]
        splits["train"], splits["validation"] = split_validation(splits["train"], holdout)
    stem = Path(train).stem
    task = ClassificationTask(name or (Path(train).parent.name if stem == "train" else stem), splits, names, fields,
                              fingerprint=fingerprint)
    if unscored := [n for n in names if n not in evaluated]:
        # legal (a class the model may predict), but a class no file scores is mostly a split cut short or mixed up
        task.notes = (f"{task.name}: train classes in neither validation nor test "
                      f"({', '.join(f for f in (validation, test) if f)}): {listed(unscored)}; they are trained on "
                      "but never tested (a split cut short, or another task's file?)",)
    return task


def _check_row(file: str, i: int, row: dict, fields: tuple[str, ...], label_column: str) -> None:
    """Refuse a row of a user's file whose texts or label cannot be what they claim, naming the file and the row
    (1-based): the task would otherwise name a made-up id, or make a class of a JSON list's repr."""
    for c in (*fields, label_column):
        if c not in row:
            raise DataError(f"{file}: row {i + 1} has no column {c!r}; columns: {sorted(row)}")
    for f in fields:
        if not isinstance(row[f], str) or not row[f].strip():
            raise DataError(f"{file}: row {i + 1}: text (column {f!r}) must be a non-empty string, got {row[f]!r}")
    label = row[label_column]
    if isinstance(label, (list, dict)):  # JSON only: str() would make "['pos']" a class of its own
        raise DataError(f"{file}: row {i + 1}: label (column {label_column!r}) is "
                        f"{'a list' if isinstance(label, list) else 'an object'} ({label!r}); a label is a string, "
                        "a number or a boolean")
    if label_name(label) == "":  # would otherwise become one more class
        raise DataError(f"{file}: row {i + 1} has an empty label (column {label_column!r}); every row needs one")


def _class_names(rows: list[dict], label_column: str, file: str) -> list[str]:
    """The distinct labels of train, sorted (numerically when all are integers). A column mixing numbers, booleans
    and names is refused: it is almost always the wrong column, or a row whose fields shifted."""
    labels = [label_name(row[label_column]) for row in rows]
    possible, first = set(LABEL_KINDS), {}  # kinds every label so far can be; kind -> where its first label is
    for i, (row, label) in enumerate(zip(rows, labels)):
        kinds = _label_kinds(row[label_column], label)
        for kind in kinds:
            first.setdefault(kind, f"row {i + 1}: {label!r}")
        if not possible & kinds:
            kinds = sorted((max(possible, key=LABEL_KINDS.index), max(kinds, key=LABEL_KINDS.index)),
                           key=LABEL_KINDS.index)
            raise DataError(f"{file}: column {label_column!r} mixes {kinds[0]}s and {kinds[1]}s as labels "
                            f"({first[kinds[0]]}; {first[kinds[1]]}):"
                            " is it the label column, or is a row corrupt? Labels are all numbers, all booleans or "
                            "all names")
        possible &= kinds
    values = set(labels)
    numeric = all(re.fullmatch(r"-?\d+", v) for v in values)
    return sorted(values, key=(lambda v: (int(v), v)) if numeric else None)


LABEL_KINDS = ("number", "boolean", "name")


def _label_kinds(value, name: str) -> set[str]:
    """What a label can be: a JSON boolean among names (true beside "pos", "neg") would silently be a class, but a
    text file's "true" may be a name (LIAR's true, half-true, pants-fire) as well as a boolean."""
    if NUMBER.fullmatch(name):
        return {"number"}
    if isinstance(value, bool):
        return {"boolean"}
    return {"boolean", "name"} if name in ("true", "false") else {"name"}
