"""Named model sizes: two for CPU work and the paper's three (docs/paper.md#architecture).

Parameter counts (`ModelConfig.num_parameters`, untied LM head counted; "non-embedding" leaves out both
vocabulary-sized matrices):

| name | layers | hidden | FFN  | heads | KV | vocab   | non-embedding | total     |
|------|--------|--------|------|-------|----|---------|---------------|-----------|
| micro| 4      | 128    | 512  | 2     | 1  | 8,192   | 0.98M         | 3.08M     |
| tiny | 4      | 256    | 1024 | 4     | 2  | 8,192   | 3.93M         | 8.13M     |
| mini | 8      | 512    | 2048 | 8     | 4  | 32,768  | 31.47M        | 65.02M    |
| 210m | 12     | 768    | 3072 | 12    | 12 | 128,256 | 113.27M       | 310.27M   |
| 610m | 26     | 1152   | 4096 | 18    | 6  | 128,256 | 460.12M       | 755.63M   |
| 1b   | 28     | 1728   | 5120 | 18    | 6  | 128,256 | 966.23M       | 1,409.48M |

The paper's size names count the body plus one vocabulary matrix (210m: 113M + 98.5M = 212M; 610m: 608M;
1b: 1.19B).

`micro` is the CPU studies' size: the demo (2 models and random init, 36 fine-tuning runs) in 10.7-21 minutes on 2
cores with bf16, the small study (6 models, 261 runs) in about 30 (docs/benchmarks.md).
`tiny` is the 2-core CPU single-run demo: head_dim 64 like the paper sizes and GQA (2 KV heads) so that the demo runs
the same code path as 610m/1b. `mini` is a laptop/GPU smoke size, GQA 2:1. Both have a small vocabulary because
the demo trains its own BPE tokenizer; pass `vocab_size=` (and the special token ids) from the tokenizer
actually used. The paper sizes hold the authors' Llama-3 ids (128,256 tokens, mask 128002, padding EOS); a
pretraining run replaces them with its data's tokenizer's, which for Llama-3's own tokenizer adds a mask token
(docs/evaluation.md, "Paper protocol vs the authors' code").
"""
from __future__ import annotations

from typing import Any

from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.model.config import ModelConfig

# Llama-3 ids as EuroBERT uses them: <|begin_of_text|>, <|end_of_text|> (also padding), the mask token.
_LLAMA3_TOKENS: dict[str, Any] = {
    "vocab_size": 128_256, "bos_token_id": 128_000, "eos_token_id": 128_001, "pad_token_id": 128_001,
    "mask_token_id": 128_002,
}


def _shape(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int) -> dict[str, int]:
    return {
        "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": ffn,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
    }


PRESETS: dict[str, dict[str, Any]] = {
    #                   layers hidden   FFN heads KV
    "micro": {**_shape(4, 128, 512, 2, 1), "vocab_size": 8192},
    "tiny": {**_shape(4, 256, 1024, 4, 2), "vocab_size": 8192},
    "mini": {**_shape(8, 512, 2048, 8, 4), "vocab_size": 32_768},
    "210m": {**_shape(12, 768, 3072, 12, 12), **_LLAMA3_TOKENS},
    "610m": {**_shape(26, 1152, 4096, 18, 6), **_LLAMA3_TOKENS},
    "1b": {**_shape(28, 1728, 5120, 18, 6), **_LLAMA3_TOKENS},
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str, **overrides: Any) -> ModelConfig:
    """The `ModelConfig` of a named size, with any field replaced by `overrides` (e.g. `vocab_size=`)."""
    key = name.lower()
    if key not in PRESETS:
        raise EncoderlabError(f"unknown model preset {name!r}; available: {', '.join(PRESETS)}")
    # one line naming each bad field and what is allowed (pydantic's own message is several lines and a link)
    return validate(ModelConfig, {**PRESETS[key], **overrides}, where=f"model (preset {name!r})")
