"""How the retrieval family's bi-encoder turns text into embeddings and scores them: the prompts a query and a
document are framed with, mean pooling over bidirectional hidden states, the two similarity heads (a learnt inverse
temperature, or sentence-transformers' fixed scale 20) and InfoNCE over a batch. The retrieval task trains and
searches with them; the sentence-transformers export (hub/sentence.py) and `Encoder.embed` (api.py) compute the
same embeddings."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.tasks.base import mean_pool

QUERY_PREFIX, DOCUMENT_PREFIX = "Query: ", "Document: "
TEMPERATURE = 0.05  # initial InfoNCE temperature: logits = cosine / 0.05
MNRL_SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss: logits = cosine x 20, fixed
MAX_SCALE = 100.0  # the learnt inverse temperature is clipped here (as CLIP does) so it cannot blow up


def query_text(text: str) -> str:
    return QUERY_PREFIX + text


def document_text(title: str, text: str) -> str:
    return DOCUMENT_PREFIX + (f"{title} {text}" if title else text)


class RetrievalHead(nn.Module):
    """A learnable log inverse temperature, initialised to log(1 / 0.05); embeddings are the backbone's own."""

    def __init__(self, temperature: float = TEMPERATURE) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature)))

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        """(B, C), (N, C) -> (B, N) cosine similarities times the inverse temperature."""
        scale = self.log_scale.exp().clamp(max=MAX_SCALE)
        return scale * F.normalize(queries.float(), dim=-1) @ F.normalize(documents.float(), dim=-1).T


class FixedScaleHead(nn.Module):
    """Cosine similarities times a fixed scale (a buffer: nothing to train)."""

    def __init__(self, scale: float = MNRL_SCALE) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(scale))

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        return self.scale * F.normalize(queries.float(), dim=-1) @ F.normalize(documents.float(), dim=-1).T


def info_nce(logits: Tensor, false_negatives: Tensor | None = None) -> Tensor:
    """Cross-entropy of each query (row) against its own document (the diagonal) among the batch's documents.

    false_negatives (B, B) bool: True where column j is also relevant to query i (j != i): left out of the softmax.
    """
    if false_negatives is not None:
        logits = logits.masked_fill(false_negatives, float("-inf"))
    return F.cross_entropy(logits, torch.arange(logits.shape[0], device=logits.device))


def encode(backbone: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean-pooled bidirectional hidden states, float32: (B, T) -> (B, C)."""
    hidden = backbone(input_ids, causal=False, attention_mask=attention_mask)
    return mean_pool(hidden.float(), attention_mask)
