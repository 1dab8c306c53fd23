"""`encoderlab export CKPT --out DIR --as sentence-transformers`: a folder `SentenceTransformer(DIR)` loads as a
bi-encoder that embeds text exactly as encoderlab's retrieval evaluation does (tasks/bi_encoder.py).

That is: the body of the checkpoint's own family with bidirectional attention (`EuroBertModel` for encoderlab's own
encoders; `LlamaModel`, `MistralModel`, `Qwen2Model` or `Qwen3Model` with `is_causal: false` for a model imported from
that family, also after continued pretraining: hub/exporter.py `own_family`), input framed `<bos> text <eos>` and cut
to the model's context, the mean of the final hidden states over non-padding tokens, compared by cosine similarity;
queries and documents carry the retrieval prompts `Query: ` / `Document: ` (`encode_query`, `encode_document`), which
the mean includes. The folder holds the bare body (no LM head): loading a masked-LM checkpoint into the model
`AutoModel` builds makes transformers warn about the unused head. Module types use the classic
`sentence_transformers.models` names, which every sentence-transformers version loads silently.
"""
from __future__ import annotations

import json
from pathlib import Path

from encoderlab.model.config import ModelConfig
from encoderlab.tasks.bi_encoder import DOCUMENT_PREFIX, QUERY_PREFIX

KIND = "sentence-transformers"  # hub/card.py SENTENCE
POOLING = "1_Pooling"

def write_modules(folder: Path, cfg: ModelConfig, max_seq_length: int | None = None) -> None:
    """The sentence-transformers files beside the transformers model saved in `folder` (its root module); inputs up
    to `max_seq_length` tokens (default: the model's positions)."""
    def dump(name: str, obj: object) -> None:
        (folder / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")

    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING, "type": "sentence_transformers.models.Pooling"}])
    dump("sentence_bert_config.json", {"max_seq_length": max_seq_length or cfg.max_position_embeddings,
                                       "do_lower_case": False})
    dump("config_sentence_transformers.json", {
        "prompts": {"query": QUERY_PREFIX, "document": DOCUMENT_PREFIX}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"})
    (folder / POOLING).mkdir()
    dump(f"{POOLING}/config.json", {
        "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})

