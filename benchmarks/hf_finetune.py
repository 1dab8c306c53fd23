"""One fine-tuning run the Hugging Face way: the baseline of `sweep_throughput.py`, one process per run.

Loads an exported EuroBERT folder, tokenises the task's data with its Hugging Face tokenizer, trains with `Trainer`
and scores validation and test, then prints one JSON line. Every run pays for its own interpreter start, imports,
model load and tokenisation, as an evaluation script launched once per (LR, seed) does.

  classification  EuroBertForSequenceClassification, classifier_pooling="mean", DataCollatorWithPadding
  tokens          EuroBertForTokenClassification, first sub-word labelled, DataCollatorForTokenClassification
  qa              transformers has no EuroBERT QA head: EuroBertModel + Linear(hidden, 2) span head, trained and
                  post-processed as transformers' run_qa.py example does (windows with stride, top-20 spans)
  retrieval       no recipe either: EuroBertModel, mean pooling, in-batch InfoNCE with a learnable temperature in
                  Trainer.compute_loss; exact cosine search over the corpus, NDCG@10

Data comes from `--data`, written by sweep_throughput.py from the encoderlab task (same examples, same subsets).
Deliberately free of encoderlab imports: the baseline is what a user of transformers alone would run.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import string
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

STARTED = time.perf_counter()

import torch  # noqa: E402  (timed from before the heavy imports)
from torch import nn  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ metrics


def squad_normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_f1(prediction: str, golds: list[str]) -> float:
    def f1(p: str, g: str) -> float:
        pt, gt = squad_normalize(p).split(), squad_normalize(g).split()
        common = sum((Counter(pt) & Counter(gt)).values())
        if not pt or not gt:
            return float(pt == gt)
        return 0.0 if common == 0 else 2 * common / (len(pt) + len(gt))
    return max(f1(prediction, g) for g in golds) if golds else float(not squad_normalize(prediction))


def ndcg_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(r + 2) for r, d in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    best = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
    return dcg / best if best > 0 else 0.0


def fit(trainer, args):
    if args.weights == "bf16":  # encoderlab's `weights: bf16`: bf16 weights and AdamW state, not fp32 under autocast
        trainer.model.to(torch.bfloat16)
    trainer.train()
    # Trainer also orders *prediction* batches by length under group_by_length (a random order): predictions
    # must come back in dataset order to be matched with their examples.
    trainer.args.train_sampling_strategy = "random"


# ------------------------------------------------------------------------------------------------ families


def classification(args, tok, data: Path, meta: dict, training_args):
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer

    fields = meta["text_fields"]
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=len(meta["labels"]),
                                                               classifier_pooling="mean")

    def encode(rows):
        texts = [rows[f] for f in fields]
        out = tok(*texts, truncation=True, max_length=args.max_length)
        out["labels"] = rows["label"]
        return out

    splits = {s: Dataset.from_list(read_jsonl(data / f"{s}.jsonl")) for s in ("train", "validation", "test")}
    splits = {s: d.map(encode, batched=True, remove_columns=d.column_names) for s, d in splits.items()}
    trainer = Trainer(model=model, args=training_args, train_dataset=splits["train"],
                      data_collator=DataCollatorWithPadding(tok))
    fit(trainer, args)
    scores = {}
    for split in ("validation", "test"):
        out = trainer.predict(splits[split])
        scores[split] = 100.0 * float((out.predictions.argmax(-1) == out.label_ids).mean())
    return scores


def tokens(args, tok, data: Path, meta: dict, training_args):
    from datasets import Dataset
    from seqeval.metrics import f1_score
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, Trainer

    labels = meta["labels"]
    model = AutoModelForTokenClassification.from_pretrained(args.model, num_labels=len(labels))

    def encode(rows):
        out = tok(rows["tokens"], is_split_into_words=True, truncation=True, max_length=args.max_length)
        out["labels"] = []
        for i, tags in enumerate(rows["tags"]):
            seen, row = set(), []
            for w in out.word_ids(i):
                row.append(-100 if w is None or w in seen else tags[w])
                seen.add(w)
            out["labels"].append(row)
        return out

    raw = {s: read_jsonl(data / f"{s}.jsonl") for s in ("train", "validation", "test")}
    splits = {s: Dataset.from_list(r).map(encode, batched=True, remove_columns=["id", "tokens", "tags"])
              for s, r in raw.items()}
    trainer = Trainer(model=model, args=training_args, train_dataset=splits["train"],
                      data_collator=DataCollatorForTokenClassification(tok))
    fit(trainer, args)
    scores = {}
    for split in ("validation", "test"):
        out = trainer.predict(splits[split])
        predictions = []
        for row, logits, gold in zip(raw[split], out.predictions, out.label_ids):
            tags = [labels[int(p)] for p, g in zip(logits.argmax(-1), gold) if g != -100]
            predictions.append(tags + ["O"] * (len(row["tags"]) - len(tags)))  # words cut off: "O"
        scores[split] = 100.0 * f1_score([[labels[t] for t in r["tags"]] for r in raw[split]], predictions)
    return scores


class SpanModel(nn.Module):
    """EuroBertModel + a start/end Linear, with the loss of transformers' *ForQuestionAnswering heads."""

    def __init__(self, path: str) -> None:
        super().__init__()
        from transformers import AutoModel

        self.model = AutoModel.from_pretrained(path)
        self.qa_outputs = nn.Linear(self.model.config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, start_positions=None, end_positions=None):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        start, end = self.qa_outputs(hidden).float().unbind(-1)
        out = {"start_logits": start, "end_logits": end}
        if start_positions is not None:
            ce = nn.CrossEntropyLoss()
            out["loss"] = (ce(start, start_positions) + ce(end, end_positions)) / 2
        return out


def qa(args, tok, data: Path, meta: dict, training_args):
    import numpy as np
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer

    model = SpanModel(args.model)
    raw = {s: read_jsonl(data / f"{s}.jsonl") for s in ("train", "validation", "test")}

    def features(rows, train: bool):
        # Questions cut to half the length (as encoderlab does), so that every window keeps room for context and
        # for the stride; run_qa.py's stride of 128 where windows are long enough.
        half = args.max_length // 2
        questions = [tok.decode(ids[:half]) for ids in tok(rows["question"], add_special_tokens=False)["input_ids"]]
        enc = tok(questions, rows["context"], truncation="only_second", max_length=args.max_length,
                  stride=min(128, (args.max_length - half - 3) // 2), return_overflowing_tokens=True,
                  return_offsets_mapping=True)
        mapping = enc.pop("overflow_to_sample_mapping")
        enc["example"], starts, ends = [], [], []
        for i, offsets in enumerate(enc["offset_mapping"]):
            seq = enc.sequence_ids(i)
            ex = mapping[i]
            enc["example"].append(ex)
            enc["offset_mapping"][i] = [o if seq[k] == 1 else None for k, o in enumerate(offsets)]
            if train:
                answer = rows["answers"][ex]
                a = answer["answer_start"][0]
                b = a + len(answer["text"][0])
                ctx = [k for k, s in enumerate(seq) if s == 1]
                if not ctx or offsets[ctx[0]][0] > a or offsets[ctx[-1]][1] < b:
                    starts.append(0), ends.append(0)  # answer outside the window: point at the first token
                else:
                    starts.append(next(k for k in ctx if offsets[k][1] > a))
                    ends.append(max(k for k in ctx if offsets[k][0] < b))
        if train:
            enc["start_positions"], enc["end_positions"] = starts, ends
            enc.pop("offset_mapping")
            enc.pop("example")
        return enc

    train = Dataset.from_list(raw["train"])
    train = train.map(lambda r: features(r, True), batched=True, remove_columns=train.column_names)
    trainer = Trainer(model=model, args=training_args, train_dataset=train,
                      data_collator=DataCollatorWithPadding(tok))
    fit(trainer, args)
    scores = {}
    for split in ("validation", "test"):
        d = Dataset.from_list(raw[split])
        feats = d.map(lambda r: features(r, False), batched=True, remove_columns=d.column_names)
        out = trainer.predict(feats.remove_columns(["offset_mapping", "example"]))
        start_logits, end_logits = out.predictions
        best: dict[int, tuple[float, str]] = {}
        for f, (ex, offsets) in enumerate(zip(feats["example"], feats["offset_mapping"])):
            s, e = start_logits[f], end_logits[f]
            for i in np.argsort(s)[-20:][::-1]:
                for j in np.argsort(e)[-20:][::-1]:
                    if (i >= len(offsets) or j >= len(offsets) or offsets[i] is None or offsets[j] is None
                            or j < i or j - i + 1 > 30):
                        continue
                    score = float(s[i] + e[j])
                    if ex not in best or score > best[ex][0]:
                        best[ex] = (score, raw[split][ex]["context"][offsets[i][0] : offsets[j][1]])
        f1 = [squad_f1(best.get(i, (0, ""))[1], row["answers"]["text"]) for i, row in enumerate(raw[split])]
        scores[split] = 100.0 * sum(f1) / len(f1)
    return scores


class BiEncoder(nn.Module):
    """EuroBertModel, mean pooling, and the learnable inverse temperature of InfoNCE (log(1 / 0.05) at start)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        from transformers import AutoModel

        self.model = AutoModel.from_pretrained(path)
        self.log_scale = nn.Parameter(torch.tensor(math.log(20.0)))

    def embed(self, input_ids, attention_mask):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.float()
        mask = attention_mask.unsqueeze(-1).float()
        return nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0), dim=-1)

    def forward(self, q_input_ids, q_attention_mask, d_input_ids, d_attention_mask):
        q, d = self.embed(q_input_ids, q_attention_mask), self.embed(d_input_ids, d_attention_mask)
        logits = self.log_scale.exp().clamp(max=100.0) * q @ d.T
        return {"loss": nn.functional.cross_entropy(logits, torch.arange(len(q), device=q.device))}


def retrieval(args, tok, data: Path, meta: dict, training_args):
    from datasets import Dataset
    from transformers import Trainer

    corpus = {r["_id"]: r["text"] for r in read_jsonl(data / "corpus.jsonl")}
    queries = {r["_id"]: r["text"] for r in read_jsonl(data / "queries.jsonl")}
    qrels = json.loads((data / "qrels.json").read_text())
    model = BiEncoder(args.model)
    pairs = [{"query": queries[q], "doc": corpus[next(d for d, g in rel.items() if g > 0)]}
             for q, rel in sorted(qrels["train"].items())]

    def encode(rows):
        q = tok(rows["query"], truncation=True, max_length=args.max_length)
        d = tok(rows["doc"], truncation=True, max_length=args.max_length)
        return {"q_input_ids": q["input_ids"], "q_attention_mask": q["attention_mask"],
                "d_input_ids": d["input_ids"], "d_attention_mask": d["attention_mask"],
                "length": [len(a) + len(b) for a, b in zip(q["input_ids"], d["input_ids"])]}  # group_by_length

    train = Dataset.from_list(pairs).map(encode, batched=True, remove_columns=["query", "doc"])

    def collate(rows):
        out = {}
        for side in ("q", "d"):
            padded = tok.pad([{"input_ids": r[f"{side}_input_ids"], "attention_mask": r[f"{side}_attention_mask"]}
                              for r in rows], return_tensors="pt")
            out[f"{side}_input_ids"], out[f"{side}_attention_mask"] = padded["input_ids"], padded["attention_mask"]
        return out

    training_args.remove_unused_columns = False
    trainer = Trainer(model=model, args=training_args, train_dataset=train, data_collator=collate)
    fit(trainer, args)
    device = next(model.parameters()).device
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)

    @torch.no_grad()
    def embed(texts: list[str]) -> torch.Tensor:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = torch.empty(len(texts), model.model.config.hidden_size, device=device)
        for b in range(0, len(order), args.eval_batch):
            idx = order[b : b + args.eval_batch]
            enc = tok([texts[i] for i in idx], truncation=True, max_length=args.max_length, padding=True,
                      return_tensors="pt").to(device)
            with autocast:
                out[idx] = model.embed(enc["input_ids"], enc["attention_mask"])
        return out

    model.eval()
    searched = json.loads((data / "searched.json").read_text())
    docs = embed([corpus[d] for d in searched])
    scores = {}
    for split in ("validation", "test"):
        qids = sorted(qrels[split])
        top = (embed([queries[q] for q in qids]) @ docs.T).topk(min(10, len(searched)), dim=1).indices.tolist()
        scores[split] = 100.0 * sum(ndcg_at_10([searched[d] for d in row], qrels[split][q])
                                    for q, row in zip(qids, top)) / len(qids)
    return scores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an exported EuroBERT folder")
    p.add_argument("--data", type=Path, required=True, help="the task folder written by sweep_throughput.py")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup-steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--eval-batch", type=int, default=128)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.95))
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (Trainer's bf16=True)")
    p.add_argument("--weights", choices=["fp32", "bf16"], default="fp32", help="the weights' and AdamW state's dtype")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--sampling", default="group_by_length", help="Trainer's train_sampling_strategy")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer, TrainingArguments, set_seed
    from transformers.utils import logging

    logging.set_verbosity_error()
    set_seed(args.seed)  # before the model is built, so that the seed decides the new head (as run_glue.py does)
    meta = json.loads((args.data / "task.json").read_text())
    tok = AutoTokenizer.from_pretrained(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        training_args = TrainingArguments(
            output_dir=scratch, per_device_train_batch_size=args.batch, per_device_eval_batch_size=args.eval_batch,
            learning_rate=args.lr, max_steps=args.steps, warmup_steps=args.warmup_steps, lr_scheduler_type="linear",
            optim="adamw_torch_fused", adam_beta1=args.betas[0], adam_beta2=args.betas[1], adam_epsilon=args.eps,
            weight_decay=args.weight_decay, max_grad_norm=args.grad_clip, bf16=args.bf16, seed=args.seed,
            data_seed=args.seed, save_strategy="no", eval_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=True, dataloader_num_workers=0, train_sampling_strategy=args.sampling,
            use_cpu=not torch.cuda.is_available())
        family = {"classification": classification, "tokens": tokens, "qa": qa, "retrieval": retrieval}[meta["family"]]
        scores = family(args, tok, args.data, meta, training_args)
    print(json.dumps({"lr": args.lr, "seed": args.seed, "scores": scores,
                      "seconds": round(time.perf_counter() - STARTED, 2)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
