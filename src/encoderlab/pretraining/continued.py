"""Continued pretraining of a transformers masked-LM model: `init.from_weights` naming a transformers folder (or a
named encoder such as `minilm-l6`) makes that model, in transformers' own class, the run's model
(model/transformers_mlm.py), read from its safetensors with its own tokenizer's data.

Its weights load as `AutoModelForMaskedLM.from_pretrained` reads them (a body saved without its head, as
sentence-transformers folders are, loads into the body's names); every weight of the body must be in the files. A head
the folder lacks starts as transformers initialises it for that class, from the run's seed (BERT's: the transform's
dense layer normal with the config's initializer_range, its LayerNorm ones and zeros, the output bias zeros, the
decoder tied to the word embeddings), and the run's log names those weights.
"""
from __future__ import annotations

from pathlib import Path

import torch

from encoderlab.core.errors import EncoderlabError
from encoderlab.data.tokenizer import code_not_run
from encoderlab.model.transformers_body import TransformersConfig
from encoderlab.runs import checkpoint as ckpt
from encoderlab.runs.encoders import (
    NAMED,
    OWN_BACKBONE,
    UNUSED_MISSING,
    import_command,
    is_continued,
    is_encoderlab_checkpoint,
    is_transformers_folder,
    model_type,
    read_folder,
    resolve_encoder,
    transformer_module,
    transformers_config,
)
from encoderlab.runs.encoders import continued_config as continued_config_of
from encoderlab.runs.hub_models import download, hub_repo

PROBE_DOC_TOKENS = 160  # longer than ModernBERT's 128-token local window, so that a mask that drops it shows


def transformers_source(cfg) -> Path | None:
    """The transformers folder (a named encoder unpacked) that `init.from_weights` names, else None."""
    source = cfg.init.from_weights
    if source is None:
        return None
    path = Path(source)
    try:
        module = transformer_module(path)  # sentence-transformers' older layout: the model in 0_Transformer/
    except EncoderlabError as exc:  # a modules.json that leads to no model, blamed on the key like its other refusals
        raise EncoderlabError(f"init.from_weights={source}: {exc}") from None
    if is_transformers_folder(path) or module or (not path.exists() and source in NAMED):
        return resolve_encoder(path)
    if is_encoderlab_checkpoint(path):
        found = ckpt.resolve(path)
        return found if is_continued(found) else None  # a run of a transformers model, continued again
    if not path.exists() and (repo := hub_repo(source)):  # config, safetensors, tokenizer; one line offline
        return download(repo)
    return None


def continued_config(cfg, folder: Path) -> TransformersConfig:
    """The folder's config (its `source`: the folder), refusing a `model:` section (the architecture is the
    folder's) and a model_type without a masked-LM class in transformers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    set_here = sorted({*(cfg.model.model_extra or {})} | ({"preset"} & cfg.model.model_fields_set))
    if set_here:
        raise EncoderlabError(f"model.{set_here[0]} is set, but init.from_weights={cfg.init.from_weights} is a "
                              "transformers model whose config.json is the architecture: remove the model section")
    if (kind := model_type(folder)) in OWN_BACKBONE:
        raise EncoderlabError(f"init.from_weights={cfg.init.from_weights}: a {kind} model is computed by encoderlab's "
                              f"own backbone; import it first ({import_command(folder)}), then "
                              "continue it with init.from_weights=CKPT")
    if is_continued(folder):
        ckpt.verify(folder, (ckpt.WEIGHTS, "tokenizer"))
        tcfg = continued_config_of(folder)
    else:
        tcfg = transformers_config(folder)  # a tokenizer with more ids than the embeddings refused there
    if type(tcfg.hf_config()) not in MODEL_FOR_MASKED_LM_MAPPING:
        raise EncoderlabError(f"{folder}: transformers has no masked-LM class for model_type {tcfg.model_type!r}; "
                              "continued pretraining trains AutoModelForMaskedLM (bert, roberta, deberta-v2, "
                              "modernbert, distilbert, xlm-roberta, ...)")
    return tcfg.model_copy(update={"source": folder})


def continued_model(cfg, tcfg: TransformersConfig, log, meta: dict):
    """The folder's model as `TransformersMaskedLM`, in fp32 on CPU, its head initialised from the run's seed where
    the folder has none, and how it keeps documents apart chosen on the data's own token ids."""
    from encoderlab.model.transformers_mlm import TransformersMaskedLM

    folder = tcfg.source
    if note := code_not_run(folder):
        log(note)
    hf, head_missing, unused = _load_masked_lm(folder, tcfg, cfg.train.seed)
    model = TransformersMaskedLM(tcfg, hf)
    if unused:  # a BERT pooler: the masked-LM class has none, so its checkpoints and exports carry none either
        log(f"{folder}: {', '.join(unused)} left out: {type(hf).__name__} has no such weights (its checkpoints and "
            "exports carry none)")
    if head_missing:
        log(f"{folder} holds no masked-LM head ({len(head_missing)} weights: {', '.join(head_missing[:3])}"
            f"{', ...' if len(head_missing) > 3 else ''}): initialised as transformers initialises a "
            f"{type(hf).__name__} from train.seed {cfg.train.seed}, the decoder tied to the word embeddings")
    tok = meta["tokenizer"]
    specials = {tok.get(k) for k in ("bos_id", "eos_id", "pad_id", "mask_id")}
    ids = [i for i in range(min(tok["vocab_size"], tcfg.vocab_size)) if i not in specials]
    length = max(4, min(meta["seq_len"] // 2, PROBE_DOC_TOKENS))
    log(model.choose_layout(ids, length, torch.Generator().manual_seed(cfg.train.seed)))
    return model


def _load_masked_lm(folder: Path, tcfg: TransformersConfig, seed: int):
    """(AutoModelForMaskedLM in fp32, the head weights the folder lacks, the pooler weights the class leaves out); any
    other missing, misshapen or unexpected weight is refused."""
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(seed)  # what the folder lacks is initialised from the run's seed
    model, info = read_folder(AutoModelForMaskedLM, folder, tcfg)
    prefix = model.base_model_prefix + "."
    missing = sorted(info["missing_keys"])
    body = [k for k in missing if k.startswith(prefix) and not k[len(prefix):].startswith(UNUSED_MISSING)]
    if body:
        raise EncoderlabError(f"{folder}: {len(body)} weights of the {tcfg.model_type} body are not in its files "
                              f"(first: {body[0]}); continued pretraining would start them random")
    unused = _unused_weights(folder, model)
    if strange := [k for k in unused if not k.removeprefix(prefix).startswith(UNUSED_MISSING)]:
        raise EncoderlabError(f"{folder}: {len(strange)} weights in its files are no part of the "
                              f"{type(model).__name__} its config.json describes (first: {strange[0]}): the files "
                              "and the config are of different models")
    return model.train(), [k for k in missing if not k.startswith(prefix)], unused


def _unused_weights(folder: Path, model) -> list[str]:
    """The names in the folder's safetensors that are no weight of `model` (a body saved alone names its weights
    without the masked-LM class's prefix); transformers drops some of these without a word (BERT's pooler). A buffer
    the class computes itself and no longer saves (BERT's `position_ids`, which all-MiniLM-L6-v2's files still hold)
    belongs to the model."""
    from safetensors import safe_open

    from encoderlab.runs.encoders import weights_files

    names = set(model.state_dict()) | {name for name, _ in model.named_buffers()}
    stored: list[str] = []
    for file in weights_files(folder):
        with safe_open(str(file), "pt") as f:
            stored += list(f.keys())
    prefix = model.base_model_prefix + "."
    return sorted(k for k in stored if k not in names and prefix + k not in names)
