"""Extractive question answering: SQuAD, SQuAD v2, ReCoRD and the offline cloze sets; span start/end (or token
tagging), SQuAD F1.

Examples use the SQuAD schema (`answers: {text, answer_start}`; no answer = an unanswerable SQuAD v2 question). The
protocol's `qa.format` says how they are read: `tagging`, the paper authors' token tagging, is tasks/qa_tagging.py
(this task hands its work to it); `spans`, the default, is what follows. Examples are encoded as `<bos> question
<eos> context-window <eos>` (`inputs: eos`: no `<bos>`; position 0 is then the first question token, the null
slot all the same): the question cut to `max_length // 2` tokens, a long
context split into windows overlapping by `stride` tokens (at most half a window, HF's `doc_stride`). Answers map
to tokens through the offsets of the raw `tokenizers` encoding. A training window without the answer points to
position 0 (`<bos>`) when unanswerable questions are allowed, and is otherwise dropped from training (SQuAD v1
style), never from evaluation. Logits outside the context are masked (position 0 stays when unanswerable questions
are allowed). A prediction is the best span over all windows of an example (start <= end, at most
`max_answer_tokens` tokens, top 20 starts x top 20 ends as in HF's post-processing, an exhaustive search when those
hold no valid pair), or "" when the null score (lowest position-0 score over the windows) beats it. docs/tasks/qa.md
has the details.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.core.errors import DataError
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.base import SPLITS, EvalTask, answer, constant
from encoderlab.tasks.common import cached, char_span_to_tokens
from encoderlab.tasks.metrics import squad_scores

CACHE_VERSION = 2  # 2: questions cut to max_length // 2 are counted
TOP_K = 20
MASKED = -1e9  # logit of positions that cannot be a start or end (finite: no inf - inf in the loss)
# Validation = 5% of train where the test set is hidden (docs/paper.md#evaluation).


class SpanHead(nn.Module):
    def __init__(self, hidden_size: int, generator: torch.Generator) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 2)
        with torch.no_grad():
            nn.init.normal_(self.proj.weight, std=0.02, generator=generator)
            nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.proj(hidden)  # (B, T, 2): start and end logits


# ----------------------------------------------------------------------------------------------- pure helpers


def validate_examples(name: str, splits: dict[str, list[dict]], allow_unanswerable: bool,
                      files: dict[str, str] | None = None) -> None:
    """Raise DataError naming the first bad example: missing fields, duplicate ids, answers that are not spans.
    `files`: the user's file each split was read from, named first so that the example can be found."""
    for split in SPLITS:
        task = f"{files[split]}: QA task {name!r}" if files else f"QA task {name!r}"
        if not splits.get(split):
            raise DataError(f"{task}: the {split} split is missing or empty")
        seen: set[str] = set()
        for i, ex in enumerate(splits[split]):
            where = f"{task}, {split} example {ex.get('id', f'#{i}')!r}"
            missing = [k for k in ("id", "context", "question", "answers") if k not in ex]
            if missing:
                raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
            texts, starts = ex["answers"].get("text"), ex["answers"].get("answer_start")
            if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
                raise DataError(f"{where}: answers must hold lists 'text' and 'answer_start' of equal length")
            if ex["id"] in seen:
                raise DataError(f"{where}: the id occurs twice in the split")
            seen.add(ex["id"])
            if not texts and not allow_unanswerable:
                raise DataError(f"{where}: no answer (an unanswerable question needs allow_unanswerable=True)")
            for text, start in zip(texts, starts):
                span = ex["context"][start : start + len(text)] if isinstance(start, int) and start >= 0 else None
                if not text or span != text:
                    raise DataError(f"{where}: answer {text!r} at {start} is not a span of the context "
                                    f"(context[{start}:{start}+{len(text)}] is {span!r})")
        if not any(ex["answers"]["text"] for ex in splits[split]):  # a model that always abstains would score 100
            raise DataError(f"{task}: no question of the {split} split has an answer; a QA split needs "
                            "answerable questions (unanswerable ones may be among them)")


def window_starts(n_tokens: int, size: int, stride: int) -> list[int]:
    """First context token of each window of `size` tokens; consecutive windows overlap by min(stride, size//2)."""
    step = size - min(stride, size // 2)
    starts = [0]
    while starts[-1] + size < n_tokens:
        starts.append(starts[-1] + step)
    return starts


def best_span(start: np.ndarray, end: np.ndarray, lo: int, hi: int, max_answer_tokens: int,
              k: int = TOP_K) -> tuple[float, int, int] | None:
    """(score, start, end) of the best span inside positions [lo, hi): start <= end < start + max_answer_tokens."""
    s, e = np.asarray(start[lo:hi], dtype=np.float64), np.asarray(end[lo:hi], dtype=np.float64)
    if len(s) == 0:
        return None
    for candidates_s, candidates_e in ((np.argsort(-s, kind="stable")[:k], np.argsort(-e, kind="stable")[:k]),
                                       (np.arange(len(s)), np.arange(len(e)))):
        i, j = candidates_s[:, None], candidates_e[None, :]
        scores = np.where((j >= i) & (j - i < max_answer_tokens), s[i] + e[j], -np.inf)
        flat = int(np.argmax(scores))
        a, b = divmod(flat, scores.shape[1])
        if np.isfinite(scores[a, b]):
            return float(scores[a, b]), lo + int(candidates_s[a]), lo + int(candidates_e[b])
    return None


def _encode_split(examples: list[dict], tokenizer: TextTokenizer, max_length: int, stride: int,
                  bos: bool = True) -> dict[str, Tensor]:
    """Windows of one split as flat tensors (torch.save-able and loadable with weights_only=True); `bos`: a <bos>
    in front of each window."""
    contexts = list(dict.fromkeys(ex["context"] for ex in examples))
    index = {c: i for i, c in enumerate(contexts)}
    enc_c = tokenizer.tokenizer.encode_batch(contexts, add_special_tokens=False)
    enc_q = tokenizer.tokenizer.encode_batch([ex["question"] for ex in examples], add_special_tokens=False)
    offsets = [np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2) for e in enc_c]
    prefix, eos = [tokenizer.bos_id] if bos else [], tokenizer.eos_id
    ids: list[np.ndarray] = []
    rows = []  # (example, context position in window, first context token, context tokens, start, end)
    questions_cut = 0  # contexts are never cut (windows cover them), a question can be
    for i, ex in enumerate(examples):
        c = index[ex["context"]]
        question, context = enc_q[i].ids[: max_length // 2], enc_c[c].ids
        questions_cut += len(enc_q[i].ids) > len(question)
        size = max(1, max_length - len(question) - len(prefix) - 2)
        span = None
        if ex["answers"]["text"]:
            a = ex["answers"]["answer_start"][0]
            span = char_span_to_tokens(offsets[c], a, a + len(ex["answers"]["text"][0]))
        lo = len(prefix) + len(question) + 1
        for w0 in window_starts(len(context), size, stride):
            part = context[w0 : w0 + size]
            ids.append(np.asarray([*prefix, *question, eos, *part, eos], dtype=np.int32))
            inside = span is not None and w0 <= span[0] and span[1] < w0 + len(part)
            rows.append((i, lo, w0, len(part), lo + span[0] - w0 if inside else 0, lo + span[1] - w0 if inside else 0))
    lengths = [len(x) for x in ids]
    return {"ids": torch.from_numpy(np.concatenate(ids)), "win_ptr": torch.tensor([0, *np.cumsum(lengths)]),
            "windows": torch.tensor(rows, dtype=torch.long).reshape(-1, 6),
            "context_of": torch.tensor([index[ex["context"]] for ex in examples], dtype=torch.long),
            "offsets": torch.from_numpy(np.concatenate(offsets) if offsets else np.zeros((0, 2), np.int64)),
            "off_ptr": torch.tensor([0, *np.cumsum([len(o) for o in offsets])], dtype=torch.long),
            "questions_cut": torch.tensor(questions_cut)}


# ----------------------------------------------------------------------------------------------- the task


class QATask(EvalTask):
    family = "qa"
    metric = standard_metric = "f1"  # tagging's metric is "token_f1" (apply_protocol)
    format = "spans"  # the protocol's qa.format (apply_protocol)
    tagging = None  # the tagging format's state (qa_tagging.QATagging) when format is "tagging"
    truncation_unit = "questions"  # longer than max_length // 2 tokens; contexts are read in windows, never cut

    def __init__(self, name: str, splits: dict[str, list[dict]], *, max_answer_tokens: int = 30, stride: int = 128,
                 allow_unanswerable: bool = False, fingerprint: str = "", files: dict[str, str] | None = None) -> None:
        validate_examples(name, splits, allow_unanswerable, files)
        self.name, self.fingerprint = name, fingerprint
        self.splits = {s: list(splits[s]) for s in SPLITS}
        self.max_answer_tokens, self.stride, self.allow_unanswerable = max_answer_tokens, stride, allow_unanswerable
        self._prep: dict[str, dict[str, Tensor]] | None = None
        self._pad_id = 0

    def apply_protocol(self, protocol) -> None:
        super().apply_protocol(protocol)
        from encoderlab.tasks.qa_tagging import QATagging  # it imports this module

        self.format = protocol.qa.format
        self.tagging = QATagging(self, protocol.tokens.dropout) if self.format == "tagging" else None
        self.metric = "token_f1" if self.tagging else "f1"
        self.truncation_unit = "examples" if self.tagging else QATask.truncation_unit

    def answers_cut(self, split: str) -> int:
        """Tagging: answerable questions whose answer the cut input lost (labelled all 0, as the authors' code does)."""
        gold = self.tagging.gold(split) if self.tagging else []
        return sum(1 for ex, positions in zip(self.splits[split], gold) if ex["answers"]["text"] and not positions)

    def answers_lost(self) -> dict[str, int] | None:
        return None if self.tagging is None else {s: self.answers_cut(s) for s in SPLITS}

    # ---- preparation

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        self._refuse_once_built("prepare")
        if self.tagging:
            return self.tagging.prepare(tokenizer, max_length, cache_dir)
        # A window is [<bos>] question <eos> context <eos>, its question cut at max_length // 2 tokens: below this a
        # window of a long question and one context token would be longer than max_length
        if max_length < (need := 7 if self.inputs == "bos_eos" else 5):
            raise DataError(f"max_length={max_length} is too small for QA task {self.name!r}: at least {need} (its "
                            "special tokens, the question's first max_length // 2 tokens and a token of the context)")
        inputs = "" if self.inputs == "bos_eos" else f"{self.inputs}|"  # the default keeps its old cache key
        data = f"{CACHE_VERSION}|{self.stride}|{inputs}" + json.dumps(self.splits, sort_keys=True, ensure_ascii=False)
        self._prep = cached(cache_dir, "qa", self.name, tokenizer, max_length, data, lambda: {
            s: _encode_split(self.splits[s], tokenizer, max_length, self.stride, self.inputs == "bos_eos")
            for s in SPLITS})
        self._pad_id = tokenizer.pad_id
        self.truncated = {s: int(self._prep[s]["questions_cut"]) for s in SPLITS}
        windows = self._prep["train"]["windows"]
        keep = torch.ones(len(windows), dtype=torch.bool) if self.allow_unanswerable else windows[:, 4] > 0
        self._train_windows = torch.nonzero(keep).flatten().tolist()

    def _prepared(self, split: str) -> dict[str, Tensor]:
        if self._prep is None:
            raise RuntimeError(f"QA task {self.name!r}: call prepare(tokenizer, max_length) first")
        return self._prep[split]

    def num_train_examples(self) -> int:
        if self.tagging:
            return self.tagging.num_train_examples()
        self._prepared("train")
        return len(self._train_windows)

    @property
    def train_unit(self) -> str:
        """What `num_train_examples` counts: the spans format's windows (a long context gives several), questions."""
        questions = f"{len(self.splits['train']):,} questions"
        return "training questions" if self.tagging else f"training windows (of {questions})"

    def windows(self, split: str) -> list[dict]:
        """The prepared windows of a split, readable (for tests and inspection)."""
        p = self._prepared(split)
        keys = ("example", "context_pos", "first_context_token", "context_tokens", "start", "end")
        return [{"ids": p["ids"][p["win_ptr"][w] : p["win_ptr"][w + 1]].tolist(),
                 **dict(zip(keys, p["windows"][w].tolist()))} for w in range(len(p["windows"]))]

    # ---- training

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        if self.tagging:
            return self.tagging.make_head(hidden_size, generator)
        return SpanHead(hidden_size, generator)

    def _batch(self, split: str, idx: list[int]) -> dict[str, Tensor]:
        p = self._prepared(split)
        ptr, rows = p["win_ptr"], p["windows"][idx]
        lengths = (ptr[torch.tensor(idx) + 1] - ptr[torch.tensor(idx)]).tolist()
        ids = torch.full((len(idx), max(lengths)), self._pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        allowed = torch.zeros(ids.shape, dtype=torch.bool)
        for r, (w, n) in enumerate(zip(idx, lengths)):
            ids[r, :n] = p["ids"][ptr[w] : ptr[w] + n]
            attention[r, :n] = 1
            lo, count = int(rows[r, 1]), int(rows[r, 3])
            allowed[r, lo : lo + count] = True
        allowed[:, 0] = self.allow_unanswerable
        return {"input_ids": ids, "attention_mask": attention, "allowed": allowed,
                "start_positions": rows[:, 4].clone(), "end_positions": rows[:, 5].clone()}

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        if self.tagging:
            yield from self.tagging.train_batches(batch_size, seed)
            return
        lengths = self._prepared("train")["win_ptr"].diff()[self._train_windows].tolist()
        for batch in self.batch_indices(lengths, batch_size, seed):
            yield self._batch("train", [self._train_windows[i] for i in batch])

    def logits(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Masked start and end logits, (B, T) each, in fp32."""
        hidden = backbone(batch["input_ids"], causal=False, attention_mask=batch["attention_mask"])  # (B, T, C)
        logits = head(hidden).float().masked_fill(~batch["allowed"].unsqueeze(-1), MASKED)  # (B, T, 2)
        return logits[..., 0], logits[..., 1]

    def loss(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        if self.tagging:
            return self.tagging.loss(backbone, head, batch)
        start, end = self.logits(backbone, head, batch)
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    # ---- evaluation

    def references(self, split: str) -> dict[str, list[str]]:
        return {ex["id"]: list(ex["answers"]["text"]) for ex in self.splits[split]}

    def predict(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, str]:
        p = self._prepared(split)
        device = next(backbone.parameters()).device
        rows, lengths = p["windows"].tolist(), p["win_ptr"].diff().tolist()
        order = sorted(range(len(rows)), key=lambda w: lengths[w])
        best: dict[int, tuple[float, int, int]] = {}
        null: dict[int, float] = {}
        for b in range(0, len(order), batch_size):
            idx = order[b : b + batch_size]
            batch = {k: v.to(device) for k, v in self._batch(split, idx).items()}
            with torch.no_grad():
                start, end = (x.cpu().numpy() for x in self.logits(backbone, head, batch))
            for r, w in enumerate(idx):
                ex, lo, tok0, count = rows[w][:4]
                null[ex] = min(null.get(ex, np.inf), float(start[r, 0] + end[r, 0]))
                found = best_span(start[r], end[r], lo, lo + count, self.max_answer_tokens)
                if found is not None and (ex not in best or found[0] > best[ex][0]):
                    best[ex] = (found[0], tok0 + found[1] - lo, tok0 + found[2] - lo)
        predictions = {}
        for i, ex in enumerate(self.splits[split]):
            answerable = i in best and not (self.allow_unanswerable and null[i] > best[i][0])
            predictions[ex["id"]] = self._span_text(split, i, *best[i][1:]) if answerable else ""
        return predictions

    def _span_text(self, split: str, i: int, first: int, last: int) -> str:
        p = self._prepared(split)
        base = int(p["off_ptr"][p["context_of"][i]])
        a, b = int(p["offsets"][base + first, 0]), int(p["offsets"][base + last, 1])
        return self.splits[split][i]["context"][a:b].strip()

    def evaluate(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        if self.tagging:
            return self.tagging.evaluate(backbone, head, split, batch_size)
        predictions = self.predict(backbone, head, split, batch_size)
        scores = squad_scores(predictions, self.references(split))
        return {"score": scores["f1"], "standard": scores["f1"], **scores,
                **constant(list(predictions.values()), answer)}

    def trivial_baseline(self, split: str) -> dict[str, float]:
        """First span: the first k words of the context, k = the median gold answer length (words) in train."""
        if self.tagging:
            return self.tagging.trivial_baseline(split)
        lengths = [len(ex["answers"]["text"][0].split()) for ex in self.splits["train"] if ex["answers"]["text"]]
        k = max(1, int(statistics.median_low(lengths))) if lengths else 1
        predictions = {ex["id"]: " ".join(ex["context"].split()[:k]) for ex in self.splits[split]}
        scores = squad_scores(predictions, self.references(split))
        return {"score": scores["f1"], "standard": scores["f1"], **scores}
