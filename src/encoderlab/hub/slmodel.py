"""The paper's released checkpoints (`model_type: sl_model`, class `SLModel`), read as data: no code of theirs runs.

`SLModelConfig` is `LlamaConfig` with `model_type = "sl_model"` and four more fields (`DEFAULTS`); `SLModel` is the
Llama body (`embed_tokens`, `layers.N...`, `norm`, saved under `model.`, some folders with an `lm_head.weight`)
attending causally or both ways by `config.is_causal`. Its folders name that code in `auto_map`; encoderlab never
imports it: config.json is read as JSON into a `transformers.LlamaConfig` (`sl_config`), the weights are Llama's,
and the tokenizer is read from a folder holding only its files (`tokenizer_folder`), whose mask token is the token
of `mask_token_id`.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from encoderlab.core.errors import EncoderlabError
from encoderlab.runs.encoders import TOKENIZER_FILES  # nothing else of the folder is copied (no config, no Python)

SL_MODEL = "sl_model"
# SLModelConfig's own fields and their defaults (a config.json written with a default may leave it out).
DEFAULTS = {"is_causal": False, "mask_token_id": 128002, "classifier_pooling": "mean", "retrieval_pooling": "mean"}


def sl_config(raw: dict, folder: Path):
    """The `transformers.LlamaConfig` of an sl_model config.json (its model_type kept as `sl_model`), with
    SLModelConfig's fields; its `auto_map` is dropped, never followed."""
    from transformers import LlamaConfig

    where = folder / "config.json"
    fields = {**DEFAULTS, **{k: v for k, v in raw.items() if k not in ("model_type", "auto_map")}}
    if not isinstance(fields["is_causal"], bool):
        raise EncoderlabError(f"{where}: is_causal={fields['is_causal']!r}: SLModel's is_causal is true or false")
    if not isinstance(fields["mask_token_id"], int) or isinstance(fields["mask_token_id"], bool):
        raise EncoderlabError(f"{where}: mask_token_id={fields['mask_token_id']!r}: SLModel's mask token is a token id")
    try:
        config = LlamaConfig.from_dict({k: v for k, v in fields.items() if k not in DEFAULTS})
    except Exception as exc:  # transformers names the field, not the file
        problem = " ".join(str(exc).split())
        raise EncoderlabError(f"{where}: not a Llama config, as an SLModelConfig is: {problem}") from None
    for key in DEFAULTS:  # set afterwards: LlamaConfig would only warn of a mask id past the vocabulary
        setattr(config, key, fields[key])
    config.model_type = SL_MODEL  # what it is; the instance's, so LlamaConfig stays Llama
    return config


def remote_code_note(raw: dict) -> str | None:
    """The note saying which code of the folder was not run (its auto_map), or None without one."""
    auto_map = raw.get("auto_map")
    if not auto_map:
        return None
    named = ", ".join(sorted({str(v) for v in auto_map.values()})) if isinstance(auto_map, dict) else str(auto_map)
    return (f"config.json's auto_map ({named}) was not followed: an sl_model is read as a Llama body, with no code "
            "from its folder")


def tokenizer_folder(folder: Path, mask_token_id: int) -> Path:
    """A temporary folder with the tokenizer files of `folder` (TOKENIZER_FILES), the token of id `mask_token_id`
    named its mask token; the caller removes it."""
    tmp = Path(tempfile.mkdtemp(prefix="encoderlab-sl-model-tokenizer-"))
    try:
        for name in TOKENIZER_FILES:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, tmp / name)
        mask = _token_of(tmp, mask_token_id, folder)
        if mask is None:
            raise EncoderlabError(f"{folder}: config.json's mask_token_id={mask_token_id} is no token of its "
                                  "tokenizer: an SLModel's mask token is a token of its vocabulary")
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            if (tmp / name).exists() or name == "tokenizer_config.json":
                settings = json.loads((tmp / name).read_text(encoding="utf-8")) if (tmp / name).exists() else {}
                (tmp / name).write_text(json.dumps({**settings, "mask_token": mask}, ensure_ascii=False),
                                        encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _token_of(folder: Path, token_id: int, source: Path) -> str | None:
    """The string of `token_id`: from tokenizer.json, else from tokenizer_config.json's added tokens."""
    if (folder / "tokenizer.json").exists():
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(str(folder / "tokenizer.json")).id_to_token(token_id)
        except Exception as exc:  # the Rust error names the problem but not the file
            raise EncoderlabError(f"{source / 'tokenizer.json'} is not a valid tokenizer.json: {exc}") from None
    try:
        added = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["added_tokens_decoder"]
        return added[str(token_id)]["content"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
