"""A body that `transformers` computes: any encoder whose `AutoModel` returns hidden states (BERT, RoBERTa,
DeBERTa-v2/v3, ModernBERT, XLM-R, MiniLM, ...) evaluated as it is, beside encoderlab's own backbone.

`TransformersConfig` describes it with the fields fine-tuning reads of a `ModelConfig` (width, depth, heads,
vocabulary, positions, the parameter count), and `TransformersBody` is called as encoderlab's `Transformer` is,
`body(input_ids, causal=False, attention_mask=mask)` -> (B, T, hidden). Its config is the folder's config.json as
data: the class comes from transformers' own mapping of `model_type`, never from the folder (no remote code).
`backbone` builds either kind of body from its config.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn


class TransformersConfig(BaseModel):
    """A transformers encoder's config.json (`config`) and its parameter count, as fine-tuning reads a config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    config: dict[str, Any]
    parameters: int
    tie_word_embeddings: bool = False  # the body has no LM head
    # Where continued pretraining read it (resolved once per run: a named encoder unpacked, a Hub id fetched); not
    # part of the model, so never dumped.
    source: Path | None = Field(None, exclude=True)

    @property
    def model_type(self) -> str:
        return self.config["model_type"]

    def _get(self, *names: str, default: int | None = None) -> int:
        for name in names:
            if self.config.get(name) is not None:
                return int(self.config[name])
        if default is None:
            raise KeyError(f"{self.model_type} config has none of {', '.join(names)}")
        return default

    @property
    def hidden_size(self) -> int:
        return self._get("hidden_size", "d_model", "dim")

    @property
    def num_hidden_layers(self) -> int:
        return self._get("num_hidden_layers", "n_layers", "num_layers")

    @property
    def num_attention_heads(self) -> int:
        return self._get("num_attention_heads", "n_heads", "num_heads")

    @property
    def num_key_value_heads(self) -> int:
        return self._get("num_key_value_heads", default=self.num_attention_heads)

    @property
    def head_size(self) -> int:
        return self._get("head_dim", default=self.hidden_size // self.num_attention_heads)

    @property
    def intermediate_size(self) -> int:
        return self._get("intermediate_size", "hidden_dim", default=4 * self.hidden_size)

    @property
    def vocab_size(self) -> int:
        return self._get("vocab_size")

    @property
    def max_position_embeddings(self) -> int:
        return self._get("max_position_embeddings", "n_positions", default=512)

    @property
    def first_position(self) -> int:
        """The first position id the model's learned positions give a token (`first_position` of its body)."""
        return _meta_facts(json.dumps(self.config, sort_keys=True))[1]

    def num_parameters(self, include_embeddings: bool = True) -> int:
        """The body's parameters (counted from the model itself when the folder was read)."""
        return self.parameters if include_embeddings else self.parameters - self.vocab_size * self.hidden_size

    def flops_per_token(self, seq_len: int, causal: bool = False, *, training: bool = True,
                        head_fraction: float = 1.0) -> float:
        """Model FLOPs per token as `ModelConfig.flops_per_token` counts them, from the body's parameter count:
        every non-embedding parameter taken as a matrix weight (biases and norms are a rounding error), the LM head
        one vocabulary matrix at `head_fraction` of the positions, bidirectional attention over the window."""
        positions = self.max_position_embeddings * self.hidden_size if self.config.get("position_embedding_type",
                                                                                       "absolute") == "absolute" else 0
        n_matmul = max(self.num_parameters(include_embeddings=False) - positions, 0)
        forward = (2 * n_matmul + 2 * self.hidden_size * self.vocab_size * head_fraction
                   + 4 * self.num_hidden_layers * self.num_attention_heads * self.head_size * seq_len)
        return 3 * forward if training else forward

    def hf_config(self):
        """transformers' config class for `model_type`, from this data (no code of the folder's)."""
        from transformers import AutoConfig

        fields = {k: v for k, v in self.config.items() if k not in ("model_type", "auto_map", "architectures")}
        return AutoConfig.for_model(self.model_type, **fields)


class TransformersBody(nn.Module):
    """`AutoModel` of a `TransformersConfig`, called as encoderlab's bodies are. Encoders attend both ways by their
    own design; `causal` is accepted for the common signature and must be False."""

    def __init__(self, cfg: TransformersConfig) -> None:
        super().__init__()
        from transformers import AutoModel

        self.config = cfg  # as encoderlab's `Transformer` keeps its own (hub/finetuned.py reads it)
        self.model = AutoModel.from_config(cfg.hf_config(), trust_remote_code=False)

    def forward(self, input_ids: Tensor, causal: bool = False, attention_mask: Tensor | None = None) -> Tensor:
        if causal:
            raise ValueError("a transformers encoder attends both ways; fine-tuning never asks it to be causal")
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def backbone(cfg, attention) -> nn.Module:
    """The body a fine-tuning run trains: encoderlab's `Transformer` for a `ModelConfig`, transformers' model for a
    `TransformersConfig` (which brings its own attention)."""
    if isinstance(cfg, TransformersConfig):
        return TransformersBody(cfg)
    from encoderlab.model.transformer import Transformer

    return Transformer(cfg, attention)


def count_parameters(cfg_dict: dict[str, Any]) -> int:
    """Parameters of the body a config.json describes, counted on the meta device (nothing allocated)."""
    return _meta_facts(json.dumps(cfg_dict, sort_keys=True))[0]


@functools.lru_cache(maxsize=32)
def _meta_facts(config_json: str) -> tuple[int, int]:
    """(parameters, first position) of the body a config.json describes, built once on the meta device."""
    cfg = TransformersConfig(config=json.loads(config_json), parameters=0)
    with torch.device("meta"):
        body = TransformersBody(cfg)
    return sum(p.numel() for p in body.parameters()), first_position(body)


def first_position(model: nn.Module) -> int:
    """The position id of a text's first token. RoBERTa, XLM-R, MPNet, Longformer and their kin number positions
    from their padding index + 1 (their position embedding has that `padding_idx`), so max_position_embeddings -
    padding_idx - 1 of them are usable; every other model starts at 0. Read off the model, not a list of names, as
    the offset follows the config's pad_token_id."""
    for name, module in model.named_modules():
        if (isinstance(module, nn.Embedding) and name.rsplit(".", 1)[-1] == "position_embeddings"
                and module.padding_idx is not None):
            return module.padding_idx + 1
    return 0
