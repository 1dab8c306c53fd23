"""The pieces every training engine is built from (finetuning/training.py, runs/optim.py), tested on their own."""
from __future__ import annotations

import math

import torch
from torch import nn

from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import FinetuneRun, LossCurve, scored_record
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.pretraining.config import AdamWSection, OptimSection
from encoderlab.runs.optim import build_adamw

CPU = torch.device("cpu")


def test_adamw_decays_matrices_only_in_pretraining_and_fine_tuning():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    for section in (OptimSection, AdamWSection):  # pretraining's, and the protocol's
        settings = section(weight_decay=0.3, betas=(0.8, 0.9))
        decayed, plain = build_adamw(model.parameters(), settings, lr=1e-3).param_groups
        assert decayed["params"] == [model[0].weight, model[2].weight] and decayed["weight_decay"] == 0.3
        assert plain["params"] == [model[0].bias, model[1].weight, model[1].bias, model[2].bias]
        assert plain["weight_decay"] == 0.0
        assert all(g["betas"] == (0.8, 0.9) and g["fused"] and g["lr"] == 1e-3 for g in (decayed, plain))


class _Task:
    """Just what the fine-tuning step calls: a head, batches, a loss (`scale` * the head's weights), scores."""

    family = "classification"  # the protocol's input length for it chooses the run's attention form

    def __init__(self, examples: int = 10) -> None:
        self.examples = examples

    def make_head(self, hidden_size: int, generator: torch.Generator) -> nn.Module:
        head = nn.Linear(hidden_size, 2)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
        return head

    def train_batches(self, batch_size: int, seed: int):
        order = torch.randperm(self.examples, generator=torch.Generator().manual_seed(seed))
        return iter([{"ids": order[i : i + batch_size]} for i in range(0, self.examples, batch_size)])

    def loss(self, backbone: nn.Module, head: nn.Module, batch: dict) -> torch.Tensor:
        return batch.get("scale", 1.0) * head.weight.pow(2).sum()

    def evaluate(self, backbone: nn.Module, head: nn.Module, split: str, batch_size: int) -> dict:
        return {"score": float(head.weight.sum()) if split == "test" else math.nan}


def test_the_loss_curve_averages_each_window_and_the_last_steps():
    curve = LossCurve(Protocol(curve_every=2), total=5)
    for step, loss in enumerate([1.0, 3.0, 2.0, 4.0, 7.0], start=1):
        curve.add(step, torch.tensor(loss))
    assert curve.points == [[2, 2.0], [4, 3.0], [5, 7.0]]


def test_a_step_with_a_non_finite_loss_changes_nothing_and_a_non_finite_score_fails_the_run():
    cfg = ModelConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    weights = Transformer(cfg).state_dict()
    protocol = Protocol(dtype="fp32", curve_every=1)
    run = FinetuneRun(_Task(), cfg, weights, seed=0, protocol=protocol, device=CPU)
    before = run.head.weight.detach().clone()
    loss, finite = run.step({"ids": torch.zeros(1), "scale": math.nan}, lr=0.1)
    assert math.isnan(float(loss)) and not finite
    assert torch.equal(run.head.weight, before)
    loss, finite = run.step({"ids": torch.zeros(1)}, lr=0.1)
    assert math.isfinite(float(loss)) and finite
    assert not torch.equal(run.head.weight, before)
    curve = LossCurve(protocol, total=1)
    body = scored_record(_Task(), run.backbone, run.head, lr=0.1, seed=0, steps=1, curve=curve, protocol=protocol,
                         device=CPU, splits=("validation", "test"), started=0.0)
    assert body["status"] == "failed" and body["reason"] == "validation score is not finite"
    body = scored_record(_Task(), run.backbone, run.head, lr=0.1, seed=0, steps=1, curve=curve, protocol=protocol,
                         device=CPU, splits=("test",), started=0.0)
    assert body["status"] == "ok" and body["scores"] == {"test": {"score": float(run.head.weight.detach().sum())}}
