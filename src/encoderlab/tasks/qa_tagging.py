"""Extractive QA as token tagging (`qa.format: tagging`), the paper authors' QA: a 2-label token head tags the answer.

Input: the pair ("Question: {q}\\nContext: ", context + <eos>) tokenised without special tokens, one sequence per
question: only the context side is cut at max_length (the appended <eos> first), no windows, no stride. With
`inputs: eos` that is the authors' input exactly; with `inputs: bos_eos` a <bos> goes in front.

Labels: every token of the input is labelled (the authors' code labels the question, the <eos> and a <bos> too):
1 from the first to the last token of the FIRST gold answer, 0 everywhere else; padding is -100. Unanswerable
questions, and answers wholly cut off by truncation, are all 0. An answer cut in the middle is tagged up to the last
kept token, as the authors' code tags it (theirs then also writes one label past the input's end).

Head: dropout (the protocol's `tokens.dropout`) -> Linear(h, 2) on every token; cross-entropy over the labelled
tokens of the batch. Prediction: the positions whose argmax is 1, any of them (question, <eos>, <bos> included).

Metrics: "score" is `token_f1`, the F1 between the predicted and the gold sets of positions (an empty set counts as
{0}; metrics.token_position_f1), mean over questions. Positions are those of the model's input, so with `inputs:
bos_eos` position 0, the "no answer" slot, is the <bos>; with `inputs: eos` it is the first question token, as for
the authors. One difference from their code: they score the argmax over the padded evaluation batch, so a padding
position tagged 1 counts as predicted and a question's score depends on what it was batched with; here only the
input's own tokens count. "standard" is SQuAD F1 against ALL gold answers of the text from the first to the last
predicted CONTEXT token (question and special tokens are not text of the context; none predicted: no answer).
"""
from __future__ import annotations

import json
import re
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
from encoderlab.tasks.base import SPLITS, EvalTask, answer, constant, linear_head
from encoderlab.tasks.common import cached, char_span_to_tokens, eval_mode
from encoderlab.tasks.metrics import squad_scores, token_position_f1

CACHE_VERSION = 1
QUESTION = "Question: {}\nContext: "  # the authors' first sequence; the context is the second


class TaggingHead(nn.Module):
    def __init__(self, hidden_size: int, dropout: float, generator: torch.Generator) -> None:
        super().__init__()
        self.p = dropout
        self.proj = linear_head(hidden_size, 2, generator)

    def forward(self, hidden: Tensor) -> Tensor:
        # No dropout call at p = 0: a random operation, even one that changes nothing, cannot run under the batched
        # engine's vmap. At p > 0 the batched engine's trial step fails and `engine: auto` trains sequentially.
        if self.p > 0:
            hidden = F.dropout(hidden, self.p, self.training)
        return self.proj(hidden)  # (B, T, 2)


def encode_tagging(examples: list[dict], tokenizer: TextTokenizer, max_length: int, bos: bool) -> dict[str, Tensor]:
    """One input per question as flat tensors: ids, labels, (first context position, context tokens kept) per row."""
    contexts = list(dict.fromkeys(ex["context"] for ex in examples))
    index = {c: i for i, c in enumerate(contexts)}
    enc_c = tokenizer.tokenizer.encode_batch(contexts, add_special_tokens=False)
    enc_q = tokenizer.tokenizer.encode_batch([QUESTION.format(ex["question"]) for ex in examples],
                                             add_special_tokens=False)
    offsets = [np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2) for e in enc_c]
    prefix = [tokenizer.bos_id] if bos else []
    ids, labels, rows, cut = [], [], [], 0
    for i, ex in enumerate(examples):
        c = index[ex["context"]]
        # The authors' tokenizer cannot cut the question (`only_second`) and fails on one that leaves no room; here
        # a question keeps at most half of max_length, so that some context always fits.
        question = enc_q[i].ids[: max_length // 2]
        room = max_length - len(prefix) - len(question)
        second = [*enc_c[c].ids, tokenizer.eos_id][:room]
        cut += len(question) < len(enc_q[i].ids) or len(second) < len(enc_c[c].ids) + 1
        lo, kept = len(prefix) + len(question), min(len(enc_c[c].ids), room)
        tags = np.zeros(lo + len(second), dtype=np.int64)
        if ex["answers"]["text"]:  # only the first gold answer is tagged
            a = ex["answers"]["answer_start"][0]
            span = char_span_to_tokens(offsets[c], a, a + len(ex["answers"]["text"][0]))
            if span is not None and span[0] < kept:
                tags[lo + span[0] : lo + min(span[1], kept - 1) + 1] = 1
        ids.append(np.asarray([*prefix, *question, *second], dtype=np.int32))
        labels.append(tags)
        rows.append((lo, kept))
    return {"ids": torch.from_numpy(np.concatenate(ids)), "labels": torch.from_numpy(np.concatenate(labels)),
            "ptr": torch.tensor([0, *np.cumsum([len(x) for x in ids])], dtype=torch.long),
            "rows": torch.tensor(rows, dtype=torch.long).reshape(-1, 2),
            "context_of": torch.tensor([index[ex["context"]] for ex in examples], dtype=torch.long),
            "offsets": torch.from_numpy(np.concatenate(offsets) if offsets else np.zeros((0, 2), np.int64)),
            "off_ptr": torch.tensor([0, *np.cumsum([len(o) for o in offsets])], dtype=torch.long),
            "cut": torch.tensor(cut)}


class QATagging:
    """The tagging format of a QATask (`QATask.apply_protocol` makes one; the task's methods hand over to it)."""

    def __init__(self, task: EvalTask, dropout: float) -> None:  # the QATask (qa.py imports this module)
        self.task, self.dropout = task, dropout
        self._prep: dict[str, dict[str, Tensor]] | None = None
        self._pad_id = 0

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        if max_length < 3:
            raise DataError(f"max_length={max_length} is too small for QA task {self.task.name!r}: at least 3")
        bos = self.task.inputs == "bos_eos"
        data = f"{CACHE_VERSION}|{self.task.inputs}|" + json.dumps(self.task.splits, sort_keys=True,
                                                                    ensure_ascii=False)
        self._prep = cached(cache_dir, "qa-tagging", self.task.name, tokenizer, max_length, data, lambda: {
            s: encode_tagging(self.task.splits[s], tokenizer, max_length, bos) for s in SPLITS})
        self._pad_id = tokenizer.pad_id
        self.task.truncated = {s: int(self._prep[s]["cut"]) for s in SPLITS}

    def prepared(self, split: str) -> dict[str, Tensor]:
        if self._prep is None:
            raise RuntimeError(f"QA task {self.task.name!r}: call prepare(tokenizer, max_length) first")
        return self._prep[split]

    def inputs(self, split: str) -> list[dict]:
        """The prepared inputs of a split, readable (for tests and inspection)."""
        p = self.prepared(split)
        return [{"ids": p["ids"][a:b].tolist(), "labels": p["labels"][a:b].tolist(), "context_pos": int(lo),
                 "context_tokens": int(kept)}
                for a, b, (lo, kept) in zip(p["ptr"][:-1].tolist(), p["ptr"][1:].tolist(), p["rows"].tolist())]

    def num_train_examples(self) -> int:
        return len(self.prepared("train")["rows"])  # every question, unanswerable ones included

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        return TaggingHead(hidden_size, self.dropout, generator)

    def batch(self, split: str, idx: list[int]) -> dict[str, Tensor]:
        p = self.prepared(split)
        ptr = p["ptr"]
        lengths = [int(ptr[i + 1] - ptr[i]) for i in idx]
        ids = torch.full((len(idx), max(lengths)), self._pad_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)  # the batched engine pads "labels" with -100 too
        attention = torch.zeros_like(ids)
        for r, (i, n) in enumerate(zip(idx, lengths)):
            ids[r, :n] = p["ids"][ptr[i] : ptr[i] + n]
            labels[r, :n] = p["labels"][ptr[i] : ptr[i] + n]
            attention[r, :n] = 1
        return {"input_ids": ids, "attention_mask": attention, "labels": labels}

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        lengths = self.prepared("train")["ptr"].diff().tolist()
        for idx in self.task.batch_indices(lengths, batch_size, seed):
            yield self.batch("train", idx)

    def logits(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        hidden = backbone(batch["input_ids"], causal=False, attention_mask=batch["attention_mask"])
        return head(hidden).float()  # (B, T, 2)

    def loss(self, backbone: Transformer, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        # The mean over the labelled tokens of the whole batch. The authors' Trainer takes it per micro-batch of 4
        # and averages the 8 (gradient accumulation), which weighs tokens slightly differently when lengths differ.
        return F.cross_entropy(self.logits(backbone, head, batch).flatten(0, 1), batch["labels"].flatten(),
                               ignore_index=-100)

    # ---- evaluation

    def gold(self, split: str) -> list[list[int]]:
        p = self.prepared(split)
        return [torch.nonzero(p["labels"][a:b]).flatten().tolist()
                for a, b in zip(p["ptr"][:-1].tolist(), p["ptr"][1:].tolist())]

    def predict_positions(self, backbone: Transformer, head: nn.Module, split: str,
                          batch_size: int) -> list[list[int]]:
        """Per question, the positions of its input (padding excluded) whose argmax is 1."""
        lengths = self.prepared(split)["ptr"].diff().tolist()
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        device = next(backbone.parameters()).device
        out: list[list[int]] = [[] for _ in lengths]
        with torch.no_grad(), eval_mode(backbone, head):
            for b in range(0, len(order), batch_size):
                idx = order[b : b + batch_size]
                batch = {k: v.to(device) for k, v in self.batch(split, idx).items()}
                tagged = (self.logits(backbone, head, batch).argmax(-1) == 1) & batch["attention_mask"].bool()
                for r, i in enumerate(idx):
                    out[i] = torch.nonzero(tagged[r]).flatten().tolist()
        return out

    def span_text(self, split: str, i: int, positions: list[int]) -> str:
        """The context text from the first to the last predicted context token ("" when none is predicted)."""
        p = self.prepared(split)
        lo, kept = p["rows"][i].tolist()
        inside = [q - lo for q in positions if lo <= q < lo + kept]
        if not inside:
            return ""
        base = int(p["off_ptr"][p["context_of"][i]])
        a, b = int(p["offsets"][base + inside[0], 0]), int(p["offsets"][base + inside[-1], 1])
        return self.task.splits[split][i]["context"][a:b].strip()

    def scores(self, split: str, positions: list[list[int]], texts: list[str] | None = None) -> dict[str, float]:
        score = token_position_f1(positions, self.gold(split))
        examples = self.task.splits[split]
        if texts is None:
            texts = [self.span_text(split, i, pos) for i, pos in enumerate(positions)]
        squad = squad_scores({ex["id"]: t for ex, t in zip(examples, texts)}, self.task.references(split))
        return {"score": score, "token_f1": score, "standard": squad["f1"], **squad}

    def evaluate(self, backbone: Transformer, head: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        positions = self.predict_positions(backbone, head, split, batch_size)
        texts = [self.span_text(split, i, pos) for i, pos in enumerate(positions)]
        return {**self.scores(split, positions, texts), **constant(texts, answer)}

    def trivial_baseline(self, split: str) -> dict[str, float]:
        """The spans format's first span (the first k words of the context, k = the median gold answer length in
        words in train), scored by both metrics: tagged as the context tokens it covers, read as its text."""
        lengths = [len(ex["answers"]["text"][0].split()) for ex in self.task.splits["train"] if ex["answers"]["text"]]
        k = max(1, int(statistics.median_low(lengths))) if lengths else 1
        p = self.prepared(split)
        positions, texts = [], []
        for i, ex in enumerate(self.task.splits[split]):
            words = list(re.finditer(r"\S+", ex["context"]))[:k]
            texts.append(" ".join(w.group() for w in words))
            lo, kept = p["rows"][i].tolist()
            base, end = int(p["off_ptr"][p["context_of"][i]]), int(p["off_ptr"][p["context_of"][i] + 1])
            span = char_span_to_tokens(p["offsets"][base:end].numpy(), words[0].start(), words[-1].end()) \
                if words else None
            positions.append([] if span is None else list(range(lo + span[0], lo + min(span[1], kept - 1) + 1)))
        return self.scores(split, positions, texts)
