"""The authors' protocol choices (docs/paper.md#the-evaluation-protocol-as-the-authors-code-runs-it), each a protocol
setting whose default keeps today's behaviour: max_length from the checkpoint's context, labelled sentence pairs,
datasets' train_test_split, the authors' hub schemas (QED), decay of every parameter in pretraining."""
from __future__ import annotations

import random
from pathlib import Path

import datasets
import pydantic
import pytest
import torch
import yaml

from encoderlab.core.io import write_jsonl
from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.records import protocol_key
from encoderlab.pretraining.config import OptimSection
from encoderlab.runs.optim import build_adamw
from encoderlab.tasks import load_task, paper_tasks
from encoderlab.tasks.classification import ClassificationTask, field_label, load_glue
from encoderlab.tasks.qa_loaders import load_hub_qa

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def test_max_length_auto_is_a_fraction_of_the_checkpoints_context():
    paper = Protocol.model_validate(yaml.safe_load((CONFIGS / "eval" / "paper.yaml").read_text()))
    assert paper.max_length == "auto" and paper.weights == "bf16" and paper.holdout == "train_test_split"
    assert paper.with_context(2048).for_task("qed").length_for("qa") == 2028  # round(0.99 x 2,048), every family
    assert paper.with_context(512).length_for("retrieval") == 507
    with pytest.raises(Exception, match="fraction of the checkpoint's context"):
        paper.length_for("qa")
    assert Protocol(max_length_by_family={"qa": 96}, max_length="auto").length_for("qa") == 96


def test_new_settings_at_their_defaults_keep_the_protocol_key_and_any_other_value_changes_it():
    demo = Protocol.model_validate(yaml.safe_load((CONFIGS / "eval" / "demo.yaml").read_text()))
    dump = demo.model_dump(mode="json")
    old = {k: v for k, v in dump.items() if k not in ("weights", "sentence_pairs", "holdout", "max_length_fraction")}
    assert protocol_key(dump) == protocol_key(old)  # records made before these settings existed keep their key
    for change in ({"weights": "bf16"}, {"sentence_pairs": "labelled"}, {"holdout": "train_test_split"},
                   {"max_length": "auto"}):
        assert protocol_key({**dump, **change}) != protocol_key(dump)


def test_bf16_weights_need_bf16_compute():
    with pytest.raises(pydantic.ValidationError, match="weights: bf16 computes in bf16"):
        Protocol(weights="bf16", dtype="fp32")


def test_labelled_pairs_are_one_text_named_by_their_fields():
    assert field_label("premise") == "Premise" and field_label("question2") == "Question 2"
    rng = random.Random(0)
    tok = train_bpe([" ".join(rng.choice("a cat sat on the mat Premise Hypothesis :".split()) for _ in range(9))
                     for _ in range(200)], 300)
    rows = [{"id": "e0", "premise": "a cat sat", "hypothesis": "on the mat", "label": 0},
            {"id": "e1", "premise": "the mat", "hypothesis": "a cat", "label": 1}]
    task = ClassificationTask("pairs", {s: rows for s in ("train", "validation", "test")}, ["a", "b"],
                              ("premise", "hypothesis"))
    task.prepare(tok, 64)
    segments = task.ids["train"][0]
    assert segments.count(tok.eos_id) == 2  # <bos> a <eos> b <eos>
    task.sentence_pairs = "labelled"
    task.prepare(tok, 64)
    text = "Premise: a cat sat\nHypothesis: on the mat"
    assert task.ids["train"][0] == [tok.bos_id, *tok.encode_batch([text])[0], tok.eos_id]


def test_the_authors_validation_split_is_datasets_train_test_split(tmp_path, hf_cache):
    train = [{"premise": f"p {i}", "hypothesis": f"h {i}", "label": i % 3, "idx": i} for i in range(60)]
    train[7]["hypothesis"] = " "  # dropped after the split, which counts every train row as the authors' does
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "validation_matched.jsonl", train[:6])
    task = load_glue("mnli", str(tmp_path), holdout="train_test_split")
    theirs = datasets.Dataset.from_list(train).train_test_split(train_size=0.95, seed=42)
    assert [ex["premise"] for ex in task.splits["validation"]] == theirs["test"]["premise"]
    kept = [p for p, h in zip(theirs["train"]["premise"], theirs["train"]["hypothesis"]) if h != " "]
    assert [ex["premise"] for ex in task.splits["train"]] == kept
    assert task.dropped == {"train": 1, "official": 0}
    ours = load_glue("mnli", str(tmp_path))
    assert [ex["premise"] for ex in ours.splits["validation"]] != theirs["test"]["premise"]  # the default: ours


def test_qed_is_a_paper_qa_task_read_in_the_authors_hub_schema(tmp_path, hf_cache):
    assert paper_tasks()["qed"] == "qa" and len(paper_tasks()) == 13

    def rows(n, split):  # hgissbkh/qed: SQuAD's columns, no id
        return [{"title": f"t{i}", "context": f"Paris is in France {i}.", "question": f"where is Paris {i}?",
                 "answers": {"text": ["France"], "answer_start": [12]}} for i in range(n)]
    folder = tmp_path / "qed"
    folder.mkdir()
    datasets.Dataset.from_list(rows(40, "train")).to_parquet(str(folder / "train.parquet"))
    datasets.Dataset.from_list(rows(5, "validation")).to_parquet(str(folder / "validation.parquet"))
    task = load_task(f"qed={folder}", holdout="train_test_split")
    assert task.name == "qed" and task.allow_unanswerable is False and len(task.splits["test"]) == 5
    theirs = datasets.Dataset.from_list(rows(40, "train")).train_test_split(train_size=0.95, seed=42)
    assert [ex["question"] for ex in task.splits["validation"]] == theirs["test"]["question"]
    assert len({ex["id"] for ex in task.splits["train"]}) == 38
    assert len(load_hub_qa("qed", str(folder)).splits["validation"]) == 2  # default: whole articles, seeded


def test_pretraining_can_decay_every_parameter():
    weights = [torch.nn.Parameter(torch.ones(2, 2)), torch.nn.Parameter(torch.ones(2))]
    assert OptimSection().decay == "matrices"
    for decay, expected in (("matrices", [0.1, 0.0]), ("all", [0.1, 0.1])):
        settings = OptimSection(weight_decay=0.1, decay=decay)
        groups = build_adamw(weights, settings, 1e-3, decay_all=settings.decay == "all").param_groups
        assert [g["weight_decay"] for g in groups] == expected
    base = yaml.safe_load((CONFIGS / "pretrain" / "paper" / "base.yaml").read_text())
    assert base["optim"]["decay"] == "all"
