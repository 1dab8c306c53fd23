"""A task family registered from this module, editing no other: sentence-pair regression (STS-like) scored by
Spearman's rank correlation. Its task file is read and validated by the family's own schema, a sweep fine-tunes it
(sequential engine, two seeds), its records are written and read back, the study aggregation scores it under its own
category, and its fine-tuned model is saved as a stock `transformers` class that computes the same predictions."""
from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
import torch
import torch.nn.functional as F
import transformers
from scipy import stats
from torch import Tensor, nn
from conftest import tiny_checkpoint

from encoderlab.core.errors import DataError, EncoderlabError
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.hub.finetuned import MANIFEST, SavedModels
from encoderlab.study.results import category_scores, task_scores
from encoderlab.tasks import registry, task_family
from encoderlab.tasks.base import SPLITS, ListTask, constant, mean_pool, pad
from encoderlab.tasks.classification import dense_gelu_head
from encoderlab.tasks.common import eval_mode
from encoderlab.tasks.taskfile import SplitFiles, TaskFile

WORDS = "a cat dog sat ran on the mat log fast slow red big small".split()


class PairRegressionTask(ListTask):
    """Two texts and a similarity score per example; the head reads the mean-pooled pair."""
    family = "sts"
    metric = standard_metric = "spearman"
    truncation_unit = "examples"

    def __init__(self, name: str, splits: dict[str, list[dict]], fingerprint: str = "") -> None:
        self.name, self.fingerprint, self.splits = name, fingerprint, {s: list(splits[s]) for s in SPLITS}
        self.ids: dict[str, list[list[int]]] = {}
        self.truncated: dict[str, int] = {}
        self.pad_id = 0

    def prepare(self, tokenizer: TextTokenizer, max_length: int, cache_dir: Path | None = None) -> None:
        bos, eos, self.pad_id = tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id
        for split in SPLITS:
            rows = self.splits[split]
            pairs = zip(tokenizer.encode_batch([r["a"] for r in rows]), tokenizer.encode_batch([r["b"] for r in rows]))
            whole = [self.framed([*a, eos, *b], bos, eos) for a, b in pairs]
            self.ids[split] = [ids[:max_length] for ids in whole]
            self.truncated[split] = sum(len(ids) > max_length for ids in whole)

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        return dense_gelu_head(hidden_size, 1, generator)

    def predictions(self, backbone, head: nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
        pooled = mean_pool(backbone(ids, causal=False, attention_mask=mask).float(), mask)
        return head(pooled).squeeze(-1)  # (B,)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, Tensor]]:
        seqs, rows = self._prepared("train"), self.splits["train"]
        for batch in self.batch_indices([len(s) for s in seqs], batch_size, seed):
            ids, mask = pad([seqs[i] for i in batch], self.pad_id)
            yield {"input_ids": ids, "attention_mask": mask, "target": torch.tensor([rows[i]["score"] for i in batch])}

    def loss(self, backbone, head: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return F.mse_loss(self.predictions(backbone, head, batch["input_ids"], batch["attention_mask"]),
                          batch["target"].float())

    def predict(self, backbone, head: nn.Module, split: str, batch_size: int) -> list[float]:
        seqs, device, out = self._prepared(split), next(backbone.parameters()).device, []
        with torch.no_grad(), eval_mode(backbone, head):
            for start in range(0, len(seqs), batch_size):
                ids, mask = pad(seqs[start:start + batch_size], self.pad_id)
                out += self.predictions(backbone, head, ids.to(device), mask.to(device)).tolist()
        return out

    def scores(self, predicted: list[float], split: str) -> dict[str, float]:
        if len(set(predicted)) < 2:  # a constant prediction ranks nothing: no correlation
            return {"score": 0.0, "standard": 0.0, "spearman": 0.0}
        value = 100 * float(stats.spearmanr(predicted, [r["score"] for r in self.splits[split]]).statistic)
        return {"score": value, "standard": value, "spearman": value}

    def evaluate(self, backbone, head: nn.Module, split: str, batch_size: int) -> dict:
        predicted = self.predict(backbone, head, split, batch_size)
        return {**self.scores(predicted, split), **constant(predicted, lambda p: f"the score {p:.3f}")}

    def trivial_baseline(self, split: str) -> dict[str, float]:
        return self.scores([0.0] * len(self.splits[split]), split)


class STSFile(SplitFiles):
    family: Literal["sts"]
    first_column: str = "a"
    second_column: str = "b"
    score_column: str = "score"


def load_sts(file: TaskFile, holdout: str, *, fingerprint: str) -> PairRegressionTask:
    settings, files = file.settings, dict(zip(SPLITS, file.split_files()))

    def rows(path: str) -> list[dict]:
        with open(path, newline="") as f:
            return [{"a": r[settings.first_column], "b": r[settings.second_column],
                     "score": float(r[settings.score_column])} for r in csv.DictReader(f)]
    return PairRegressionTask(file.name, {split: rows(path) for split, path in files.items()}, fingerprint)


def export_sts(protocol, body: registry.Body) -> registry.Export:
    """EuroBertForSequenceClassification, one output, regression: the mean-pooled dense -> GELU -> Linear head."""
    if body.kind != "eurobert":
        raise DataError("a pair regression head mean-pools: only EuroBertForSequenceClassification computes it")
    return registry.Export("EuroBertForSequenceClassification", body.kind,
                           {"0.weight": "dense.weight", "0.bias": "dense.bias", "2.weight": "classifier.weight",
                            "2.bias": "classifier.bias"},
                           {"classifier_pooling": "mean", "num_labels": 1, "problem_type": "regression"})


STS = registry.Family(
    name="sts", category="STS", settings=STSFile, load_user=load_sts, export=export_sts,
    card=registry.Card("sentence-similarity", (), "The logit is the predicted similarity.",
                       lambda cls, name: ["```python", f'{cls}.from_pretrained("{name}")', "```"]),
    standard_metric="spearman", baselines={"constant_score": "constant score"},
    metric_definitions={"spearman": "Spearman's rank correlation of predicted and gold scores, x 100."},
    sequences=1)


@pytest.fixture(scope="module")
def sts(tmp_path_factory, one_thread):
    registry.register(STS)
    root = tmp_path_factory.mktemp("sts")
    rng = random.Random(0)
    for split, n in (("train", 32), ("dev", 12), ("test", 12)):
        with open(root / f"{split}.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["a", "b", "score"])
            for _ in range(n):
                a = rng.choices(WORDS, k=4)
                shared = rng.randint(0, 4)
                out.writerow([" ".join(a), " ".join(a[:shared] + rng.choices(WORDS, k=4 - shared)), shared / 4])
    (root / "sts.yaml").write_text("family: sts\ntrain: train.csv\nvalidation: dev.csv\ntest: test.csv\n")
    tiny_checkpoint(root / "ckpt")
    yield root
    registry.unregister("sts")


class Capturing(SavedModels):
    def save(self, unit, backbone, head, recs, identity):
        super().save(unit, backbone, head, recs, identity)
        self.kept = (unit, backbone, head, recs)


def test_a_task_file_of_the_new_family_is_read_by_its_own_schema(sts, tmp_path):
    assert task_family(str(sts / "sts.yaml")) == "sts"
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: sts\ntrain: x.csv\nvalidation: x.csv\nlabel_column: y\n")  # a classification key
    with pytest.raises(EncoderlabError, match="label_column: unknown key"):
        task_family(str(bad))


def test_the_new_family_sweeps_records_aggregates_and_saves(sts):
    protocol = Protocol(name="sts", max_steps=6, batch_size=8, eval_batch_size=8, lrs=[3e-3], seeds=[0, 1],
                        max_length=32, dtype="fp32")
    keep = Capturing("all", sts / "models", sts / "ckpt", log=lambda m: None)
    summary = run_sweep(sts / "ckpt", [str(sts / "sts.yaml")], protocol, sts / "evals", keep=keep,
                        show_progress=False, log=lambda m: None, engine="sequential")

    # its records: one per seed, of its family and metric, scored with its baseline
    recs = records.load_all(sts / "evals")
    assert sorted(r["seed"] for r in recs) == [0, 1]
    assert {(r["family"], r["metric"], r["status"]) for r in recs} == {("sts", "spearman", "ok")}
    assert all(set(r["baselines"]["test"]) == {"constant_score"} for r in recs)
    entry = summary["tasks"]["sts"]
    assert entry["family"] == "sts" and entry["test"] == pytest.approx(  # the summary's 3 decimals
        sum(r["scores"]["test"]["score"] for r in recs) / 2, abs=1e-3)

    # the study's aggregation: a category of its own, beside the built-in ones, with its standard metric
    scored = task_scores(recs)
    assert scored.category == "STS" and registry.categories()[-1] == "STS"
    assert task_scores(recs, metric="standard").metric == "spearman"
    assert category_scores({"sts": scored})["STS"].mean == pytest.approx(scored.test, abs=1e-3)

    # its fine-tuned model: a stock class that computes the run's predictions, described on its card
    unit, backbone, head, saved = keep.kept
    (record,) = saved.values()
    folder = keep.folder("sts", {"lr": record["lr"], "seed": record["seed"]})
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["class"] == "EuroBertForSequenceClassification"
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids, mask = pad(unit._prepared("test"), unit.pad_id)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
    ours = torch.tensor(unit.predict(backbone, head, "test", 64))
    assert (ours - theirs).abs().max() <= 1e-5
    assert unit.scores(theirs.tolist(), "test")["score"] == pytest.approx(record["scores"]["test"]["score"])
    card = (folder / "README.md").read_text()
    assert "pipeline_tag: sentence-similarity" in card and "The logit is the predicted similarity." in card
    assert "Spearman's rank correlation" in card and "constant score" in card
