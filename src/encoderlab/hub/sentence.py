"""`encoderlab export CKPT --out DIR --as sentence-transformers`: a folder `SentenceTransformer(DIR)` loads as a
bi-encoder that embeds text exactly as encoderlab's retrieval evaluation does (evaluation/tasks/retrieval.py).

That is: the EuroBERT body with bidirectional attention, input framed `<bos> text <eos>` (the eurobert export's
tokenizer) and cut to the model's context, the mean of the final hidden states over non-padding tokens, compared by
cosine similarity; queries and documents carry the retrieval prompts `Query: ` / `Document: ` (`encode_query`,
`encode_document`), which the mean includes. The folder holds the bare `EuroBertModel` (no MLM head): loading a
masked-LM checkpoint into the model `AutoModel` builds makes transformers warn about the unused head. Module types
use the classic `sentence_transformers.models` names, which every sentence-transformers version loads silently.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from encoderlab.evaluation.tasks.retrieval import DOCUMENT_PREFIX, QUERY_PREFIX
from encoderlab.model.config import ModelConfig

KIND = "sentence-transformers"
BODY = "eurobert"  # the export kind whose model and tokenizer framing the folder holds
POOLING = "1_Pooling"

USAGE = [
    "```python", "from sentence_transformers import SentenceTransformer",
    'model = SentenceTransformer("path/to/this/folder")',
    'queries = model.encode_query(["what is the capital of France?"])  # prompt "Query: ", as in training',
    'documents = model.encode_document(["Paris is the capital of France."])  # prompt "Document: "',
    "print(model.similarity(queries, documents))  # cosine", "```",
]


def write_modules(folder: Path, cfg: ModelConfig) -> None:
    """The sentence-transformers files beside the transformers model saved in `folder` (its root module)."""
    def dump(name: str, obj: object) -> None:
        (folder / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")

    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING, "type": "sentence_transformers.models.Pooling"}])
    dump("sentence_bert_config.json", {"max_seq_length": cfg.max_position_embeddings, "do_lower_case": False})
    dump("config_sentence_transformers.json", {
        "prompts": {"query": QUERY_PREFIX, "document": DOCUMENT_PREFIX}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"})
    (folder / POOLING).mkdir()
    dump(f"{POOLING}/config.json", {
        "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})


def card(eurobert_card: str) -> str:
    """The eurobert export's model card, retold for the bare body: sentence-similarity metadata and usage."""
    text = re.sub(r"^library_name: .*$", "library_name: sentence-transformers", eurobert_card, count=1, flags=re.M)
    text = re.sub(r"^pipeline_tag: .*$", "pipeline_tag: sentence-similarity", text, count=1, flags=re.M)
    text = text.replace("`EuroBertForMaskedLM`", "`EuroBertModel`, mean-pooled by sentence-transformers")
    head, _, _ = text.rpartition("\n## Use\n")
    return "\n".join([head, "## Use", "", *USAGE, ""])
