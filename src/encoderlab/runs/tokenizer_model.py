"""The model whose tokenizer `data prepare --tokenizer` names: data packed with a model's tokenizer is for continuing
that model (the command `data prepare` prints next), so its windows must fit the positions that model reads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from encoderlab.core.errors import EncoderlabError, option


class TokenizerModel(NamedTuple):
    name: str  # the model as `init.from_weights` names it: the folder, or a named encoder's name (`minilm-l6`)
    kind: str | None  # its model_type (None: a named encoder not unpacked yet)
    folder: Path | None  # the folder of its config.json (None: a named encoder not unpacked yet)
    config: dict | None = None  # its config.json, read once (None: a named encoder not unpacked yet)


def tokenizer_model(tokenizer: str | None) -> TokenizerModel | None:
    """The model of `--tokenizer` where it names a transformers model that pretraining can continue: a named encoder
    (`minilm-l6`), a model folder or a file in one, of an encoder or of a family encoderlab's backbone computes; else
    None (a tokenizer alone, or a decoder's or an encoder-decoder's tokenizer: nothing to continue, the data is for
    a model of its own)."""
    from encoderlab.runs.encoders import NAMED, OWN_BACKBONE, is_transformers_folder, transformer_module
    from encoderlab.runs.folder_checks import is_text_encoder

    if not tokenizer:
        return None
    path = Path(tokenizer)
    if not path.exists():
        return TokenizerModel(tokenizer, None, None) if tokenizer in NAMED else None
    folder = path if path.is_dir() else path.parent
    body = transformer_module(folder) or folder  # sentence-transformers' older layout: the model in 0_Transformer/
    if not is_transformers_folder(body):
        return None
    try:
        config = json.loads((body / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # refused, naming why, when the model is continued
        return None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(kind, str) or (kind not in OWN_BACKBONE and not is_text_encoder(config)):
        return None
    return TokenizerModel(tokenizer if folder == path else str(folder), kind, body, config)


def not_continued(tokenizer: str | None) -> str | None:
    """Why the model of `--tokenizer`, a transformers folder of a decoder or an encoder-decoder, cannot be continued
    (the refusal continued pretraining gives it), else None: the data is for a model of its own."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from encoderlab.runs.encoders import OWN_BACKBONE, is_transformers_folder, transformer_module
    from encoderlab.runs.folder_checks import not_an_encoder

    if not tokenizer or not Path(tokenizer).exists():
        return None
    given = Path(tokenizer) if Path(tokenizer).is_dir() else Path(tokenizer).parent
    folder = transformer_module(given) or given  # sentence-transformers' older layout: the model in 0_Transformer/
    if not is_transformers_folder(folder):
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind in OWN_BACKBONE or kind not in CONFIG_MAPPING_NAMES:  # continued from its import / unknown: said there
        return None
    why = not_an_encoder(config)
    return f"{folder}'s own model cannot be continued: {why}" if why else None


def check_windows_fit(tokenizer: str | None, seq_len: int, given: str | None) -> None:
    """Before any work: refuse windows longer than the transformers encoder whose tokenizer packs them reads (its
    learned positions), which its continued pretraining would refuse once the corpus is packed. `tokenizer`: the
    option resolved (a named encoder's unpacked folder); `given`: as the caller gave it. A family encoderlab's own
    backbone computes is left alone: a run raises its `model.max_position_embeddings` (rotary positions)."""
    from encoderlab.runs.encoders import OWN_BACKBONE

    model = tokenizer_model(tokenizer)
    if model is None or model.config is None or model.kind in OWN_BACKBONE:
        return
    positions = learned_positions(model.config)
    if positions is None or seq_len <= positions:
        return
    raise EncoderlabError(
        f"{option('seq-len', seq_len)}: the {model.kind} model of {option('tokenizer', given or tokenizer)} reads at "
        f"most {positions} tokens (its learned positions), so continuing it on windows of {seq_len} would be refused: "
        f"use {option('seq-len', positions)} or less (for a new model with this vocabulary, copy its tokenizer files "
        "into a folder of their own and give that)")


def learned_positions(config: dict) -> int | None:
    """The most tokens a transformers encoder of this config.json reads (its learned positions, less those before
    its first); None where transformers cannot build the config, which is refused, naming why, when it is continued.
    The windows packed to continue it must fit: `check_windows_fit` and a study's `imported` encoders check them."""
    from encoderlab.model.transformers_body import TransformersConfig
    from encoderlab.runs.encoders import usable_positions

    try:
        return usable_positions(TransformersConfig(config=config, parameters=0))
    except Exception:  # noqa: BLE001 (any error of transformers' config classes)
        return None
