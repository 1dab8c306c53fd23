"""`Encoder.embed` feeds each batch to the device the model's weights are on: a model moved with `.to(device)` (a
GPU) embedded CPU token ids and failed deep in torch (`Tensor on device cpu is not on the expected device`). The meta
device stands in for a GPU here: it holds no numbers, only where a tensor is."""
from __future__ import annotations

from conftest import tiny_checkpoint

import encoderlab


def test_embed_runs_where_the_model_is(tmp_path):
    enc = encoderlab.load(tiny_checkpoint(tmp_path / "ckpt"))
    on_cpu = enc.embed(["a river village", "a market"])
    assert on_cpu.device.type == "cpu" and on_cpu.shape == (2, enc.config.hidden_size)
    enc.model.to("meta")
    moved = enc.embed(["a river village", "a market"], batch_size=1)
    assert moved.device.type == "meta" and moved.shape == on_cpu.shape
    assert enc.embed([]).device.type == "meta"
