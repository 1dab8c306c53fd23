"""What a transformers folder must be before encoderlab reads it as an encoder, judged from its files alone (no model
of the folder's built, none of its code run): a model_type transformers knows, an encoder-only text model, a
tokenizer file that is there, safetensors files that are whole. Each refusal is one line naming the folder or file.
"""
from __future__ import annotations

import inspect
from pathlib import Path

from encoderlab.core.errors import EncoderlabError

ACCEPTED = ("encoder-only text models (transformers' masked-LM family: BERT, RoBERTa, DeBERTa, ModernBERT, "
            "ELECTRA, MPNet, ...); encoder-decoders and decoders are refused")


def check_known_type(model_type: str, where: Path) -> None:
    """transformers' own error lists every type it knows (cut, it ends mid-word): say only what is wrong."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        raise EncoderlabError(f"{where}: unknown model_type {model_type!r} (transformers {transformers.__version__} "
                              "does not know it)")


def check_encoder_kind(raw: dict, folder: Path) -> None:
    """Refuse what is not an encoder-only text model. Through `AutoModel` a decoder (GPT-2, Gemma, GPT-NeoX) attends
    causally, so it would be scored as an encoder while a token never sees the ones after it; an encoder-decoder
    (T5, BART) or a model of images has no body that reads a text alone. Decided from the config: its class's
    defaults under the folder's values (is_encoder_decoder, is_decoder, is_causal), transformers' masked-LM mapping
    (the bidirectional text encoders) and whether the body's forward reads `input_ids`."""
    if why := not_an_encoder(raw):
        raise EncoderlabError(f"{folder}: {why}; encoderlab takes {ACCEPTED}")


def not_an_encoder(raw: dict) -> str | None:
    """Why a config.json of a model_type transformers knows is not of an encoder-only text model (None: it is one);
    the words of `check_encoder_kind`'s refusal, which `data prepare` repeats for the model of a --tokenizer folder
    it cannot continue."""
    kind = raw["model_type"]
    why = _not_an_encoder(kind, raw)
    return f"model_type {kind!r} is {why}" if why else None


def is_text_encoder(raw: dict) -> bool:
    """Whether a config.json is of a model_type transformers knows and an encoder-only text model: what fine-tuning,
    sweeps and MTEB read as it is, through transformers' own class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    kind = raw.get("model_type")
    return isinstance(kind, str) and kind in CONFIG_MAPPING_NAMES and _not_an_encoder(kind, raw) is None


def _not_an_encoder(kind: str, raw: dict) -> str | None:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    defaults = CONFIG_MAPPING[kind]()  # the class's defaults: a config.json leaves out what equals them

    def says(field: str) -> bool:
        return bool(raw.get(field, getattr(defaults, field, False)))

    if says("is_encoder_decoder"):
        return "an encoder-decoder (config.is_encoder_decoder)"
    if says("is_decoder") or raw.get("is_causal") is True:
        return "a decoder (config.is_decoder or is_causal: its attention is causal)"
    if kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return ("a decoder (transformers has a causal-LM class for it and no masked-LM one: its attention is causal)"
                if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "not a text encoder transformers has a masked-LM "
                "class for")
    name = MODEL_MAPPING_NAMES.get(kind)
    body = getattr(transformers, name[0] if isinstance(name, (list, tuple)) else str(name), None)
    if body is not None and "input_ids" not in inspect.signature(body.forward).parameters:
        return f"a model whose body ({body.__name__}) reads no token ids"
    return None


def check_links(folder: Path, names: tuple[str, ...]) -> None:
    """A symbolic link among the folder's `names` that leads nowhere: named, not taken for a missing file."""
    for name in names:
        path = folder / name
        if path.is_symlink() and not path.exists():
            raise EncoderlabError(f"{path} is a broken symbolic link (to {path.readlink()}, which does not exist): "
                                  "copy the file itself into the folder")


def check_safetensors(files: list[Path]) -> None:
    """Each file's header read and its data the length the header says (safetensors checks that on opening), so a
    damaged or cut file is named before transformers reads the folder."""
    from safetensors import safe_open

    for file in files:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception as exc:
            raise damaged(file, exc) from None


def damaged(file: Path, exc: BaseException) -> EncoderlabError:
    """The one line for a weights file that safetensors or torch cannot read."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return EncoderlabError(f"{file} cannot be read as weights ({type(exc).__name__}: {first}): the file is damaged "
                           "or cut short; copy the model folder again")
