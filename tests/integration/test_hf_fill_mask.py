"""An MLM-trained model, exported as EuroBERT, fills masks through `transformers.pipeline("fill-mask")`: the
exported weights, tokenizer framing and mask token together are what the model was trained on."""
from __future__ import annotations

import json
import random

import pytest
from transformers import pipeline

from encoderlab.core.config import validate
from encoderlab.data.documents import Document
from encoderlab.data.packing import pack
from encoderlab.data.tokenizer import train_bpe
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint

# Six sentences with few shared words: memorised, each masked word is determined by its neighbours.
SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a small red boat sails across the calm blue lake",
    "my old uncle plays the violin every sunday morning",
    "seven tall trees stand behind the white stone church",
    "she bakes fresh bread with honey and warm milk",
    "the young farmer feeds his cows before sunrise",
]
MASKED_WORD = 4  # the fifth word of each sentence: context on both sides


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("fill-mask")
    rng = random.Random(0)
    docs = [Document(f"d{i}", "synthetic", rng.choice(SENTENCES)) for i in range(600)]
    tok = train_bpe(SENTENCES * 20, 600)
    pack(docs, tok, root / "packed", seq_len=32, val_fraction=0.02)
    cfg = validate(PretrainConfig, {
        "name": "mlm", "out_dir": str(root), "data": {"path": str(root / "packed")},
        "model": {"preset": "tiny", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "num_key_value_heads": 1},
        "objective": "mlm30", "optim": {"lr": 3e-3},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 10, "decay_steps": 40},
        "train": {"steps": 200, "global_batch": 16, "dtype": "fp32", "log_every": 50, "eval_batches": 1,
                  "tensorboard": False, "threads": 1},
    }, "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run()
    return checkpoint.latest(root / "mlm"), tok


def test_exported_encoder_fills_masks_with_the_pipeline(tmp_path, trained):
    ckpt, tok = trained
    out = tmp_path / "export"
    summary = export_checkpoint(ckpt, out, "eurobert")
    assert summary["note"] is None  # MLM-trained and exported bidirectional: nothing to warn about
    assert summary["training"]["tokens_seen"] == 200 * 16 * 32
    card = (out / "README.md").read_text()
    assert "tokens seen: 102,400" in card and "objective schedule: `mlm30`" in card

    fill = pipeline("fill-mask", model=str(out), top_k=5)
    hits = []
    for sentence in SENTENCES:
        words = sentence.split()
        target = tok.encode_batch([" " + words[MASKED_WORD]])[0]
        assert len(target) == 1, f"{words[MASKED_WORD]!r} is not one token"
        text = " ".join(words[:MASKED_WORD]) + fill.tokenizer.mask_token + " " + " ".join(words[MASKED_WORD + 1:])
        top = [p["token"] for p in fill(text)]
        hits.append(target[0] in top)
        print(f"{text!r}: target {words[MASKED_WORD]!r} in top-5: {hits[-1]} "
              f"({[p['token_str'] for p in fill(text)]})")
    # Chance of a given token in a top-5 is 5/vocabulary (~1%); the memorised sentences should nearly always hit.
    print(json.dumps({"hits": sum(hits), "of": len(hits), "chance_top5": 5 / tok.vocab_size}))
    assert sum(hits) >= 5
