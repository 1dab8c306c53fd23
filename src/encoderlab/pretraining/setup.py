"""What a pretraining run is made of before its first step: the model config from the preset and the data's
tokenizer, the seed's initial model, the device, the checks that data, model and objectives go together, and the
resolved run that `--dry-run` prints (`describe`)."""
from __future__ import annotations

from pathlib import Path

import torch
from pydantic import ValidationError

from encoderlab.core.config import ConfigError, blamed_field, blamed_later
from encoderlab.core.errors import EncoderlabError, option, prepare_command
from encoderlab.data import packing
from encoderlab.data.loader import PackedDataset, resolve_data
from encoderlab.model import attention
from encoderlab.model.config import ModelConfig
from encoderlab.model.presets import preset
from encoderlab.model.transformer import TransformerLM
from encoderlab.pretraining import distributed, objectives
from encoderlab.model.transformers_body import TransformersConfig
from encoderlab.pretraining.config import PretrainConfig, token_ids
from encoderlab.pretraining.continued import continued_config, continued_model, transformers_source
from encoderlab.pretraining.resume import check_continues
from encoderlab.runs import checkpoint
from encoderlab.runs.encoders import usable_positions
from encoderlab.runs.logging import require_wandb
from encoderlab.runs.optim import default_device


def model_config(cfg: PretrainConfig, tokenizer: dict) -> ModelConfig | TransformersConfig:
    """The preset with the data's vocabulary, or the config.json of the transformers model `init.from_weights`
    continues (`transformers_source`). A model field set that the data's ids do not fit (`model.vocab_size=2`, the
    data's pad token being id 2) is blamed on the override or file that set it, not on the preset."""
    if (folder := transformers_source(cfg)) is not None:
        return continued_config(cfg, folder)
    try:
        cfg.model.checked(tokenizer)
    except ValidationError as exc:
        shape = [e for e in exc.errors() if e["type"] == "model_shape" and e["loc"]]
        if shape and (source := blamed_later(cfg, ["model", *map(str, shape[0]["loc"])])) is not None:
            raise ConfigError(f"{source}: model.{shape[0]['loc'][0]}: {shape[0]['msg']}") from None
    # a field's own error, or the data's ids alone: one line naming the preset
    return preset(cfg.model.preset, **{**token_ids(tokenizer), **dict(cfg.model.model_extra or {})})


def initial_model(cfg: PretrainConfig, model_cfg: ModelConfig | TransformersConfig, backend,
                  log=lambda line: None, data_meta: dict | None = None):
    """The run's model before its first step: the seed's initialisation, made on CPU so that a seed gives the same
    weights on every device (the trainer's, and the random-init baseline's); or the transformers model that
    `init.from_weights` continues, its weights read from its folder."""
    if isinstance(model_cfg, TransformersConfig):
        return continued_model(cfg, model_cfg, log, data_meta)
    torch.manual_seed(cfg.train.seed)
    module = TransformerLM(model_cfg, backend)
    module.init_weights(cfg.train.seed)
    return module


def run_data(cfg: PretrainConfig) -> Path:
    """The packed data of a run's `data.path`; a missing one is blamed on what set it (a study file's section, an
    override), as the checks made once the data is read are."""
    try:
        return resolve_data(cfg.data.path)
    except EncoderlabError as e:
        raise EncoderlabError(f"{blamed_field(cfg, 'data.path')}{e}") from None


def describe(cfg: PretrainConfig) -> dict:
    """The resolved run: what --dry-run prints and what is written beside the checkpoints."""
    data = run_data(cfg)
    meta = PackedDataset(data).meta  # its shards checked against the index: a cut file fails here, not mid-run
    mcfg = model_config(cfg, meta["tokenizer"])
    phases = cfg.phases
    launched = distributed.torchrun_world()
    for source in filter(None, (cfg.init.branch_from, cfg.init.from_weights)):
        if not isinstance(mcfg, TransformersConfig):  # (a transformers folder was read by model_config)
            checkpoint.resolve(source)  # a missing one refused by --dry-run too, not only when training starts
    global_batch = cfg.train.sequences_per_step(meta["seq_len"])
    if cfg.init.branch_from:  # refused by --dry-run as by the run
        source = checkpoint.resolve(cfg.init.branch_from)
        check_continues(cfg, checkpoint.load_state(source), source, "branch", global_batch)
        if isinstance(mcfg, ModelConfig):  # its weights' names and shapes, from the header alone
            with torch.device("meta"):
                checkpoint.check_weights_fit(source, TransformerLM(mcfg).state_dict())
    notes = check_source(cfg, mcfg, data)  # first: another tokenizer explains the checks that follow
    notes += [note] if (note := cfg.schedule_note()) else []
    check_compatible(cfg, mcfg, meta, phases, world_size=launched.size if launched else 1)
    device = resolve_device(cfg.train.device)
    attention.check(cfg.train.attention, device)
    tokens_per_step = global_batch * meta["seq_len"]
    return {
        "run_dir": str(cfg.run_dir), "data": str(data), "seq_len": meta["seq_len"],
        "train_windows": meta["splits"]["train"]["windows"],
        "model": model_summary(mcfg), "parameters": mcfg.num_parameters(),
        "non_embedding_parameters": mcfg.num_parameters(include_embeddings=False),
        "phases": [p.describe() for p in phases],
        "stable_checkpoint_step": cfg.lr_schedule.decay_start(cfg.train.steps),
        "tokens_per_step": tokens_per_step, "total_tokens": tokens_per_step * cfg.train.steps,
        "global_batch": global_batch,
        "device": str(device), "dtype": cfg.train.dtype, "dtype_asked": cfg.train.dtype_asked,
        "dtype_note": cfg.train.dtype_note(device), "source_notes": notes,
        "epochs": round(global_batch * cfg.train.steps / meta["splits"]["train"]["windows"], 3),
        "init": cfg.init.model_dump(exclude_none=True),
        "config": cfg.model_dump(mode="json"),
    }


def model_summary(mcfg: ModelConfig | TransformersConfig) -> dict:
    """The model's shape as the run's summary states it: encoderlab's config, or a transformers model's type and the
    same fields read from its config.json."""
    if not isinstance(mcfg, TransformersConfig):
        return mcfg.model_dump()
    fields = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size", "max_position_embeddings")
    return {"model_type": mcfg.model_type, **{f: getattr(mcfg, f) for f in fields}}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return default_device()
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EncoderlabError(f"train.device={name!r} but PyTorch sees no CUDA device here; use 'cpu' or 'auto'")
    return torch.device(name)


# Fields that change what a model computes without changing a weight's shape: a run that sets them otherwise than
# the checkpoint it starts from (`init.from_weights`) continues another model (a raised rope_theta can be meant).
ARCHITECTURE_ONLY = ("rope_theta", "rope_scaling", "rms_norm_eps", "sliding_window")


# The fields that give the weights their shapes: another value here is a model the checkpoint's weights do not fit.
SHAPES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "tie_word_embeddings")


def _same_shapes(saved: dict, ours: dict, source: Path, given: str) -> None:
    """Refuse a configured model of other shapes than the checkpoint's, naming them: the weights' names alone
    (`unexpected model.layers.10...`, an imported SmolLM2 under the default preset) say nothing to set."""
    differ = [f"model.{key} is {ours.get(key)!r} here, {saved[key]!r} in its model_config.json" for key in SHAPES
              if key in saved and saved[key] != ours.get(key)]
    if differ:
        raise EncoderlabError(f"init.from_weights {source}: the configured model is not this checkpoint's "
                              f"({'; '.join(differ)}): set the model section to its shapes (`data prepare "
                              f"--tokenizer {given}` prints them as --set options)")


def check_source(cfg: PretrainConfig, mcfg: ModelConfig | TransformersConfig, data_root: Path) -> list[str]:
    """Before any work, for `init.from_weights`: refuse data packed with another tokenizer than the checkpoint's (a
    token is another embedding row), and return a note per architecture field set otherwise than the checkpoint's."""
    if not cfg.init.from_weights:
        return []
    import json

    from tokenizers import Tokenizer

    ours = data_root / packing.TOKENIZER / "tokenizer.json"
    if isinstance(mcfg, TransformersConfig):
        from encoderlab.data.tokenizer import load_tokenizer

        folder = mcfg.source
        tokenizer_dir = folder / "tokenizer" if (folder / "state.json").exists() else folder  # a continued run's
        theirs = load_tokenizer(tokenizer_dir, as_transformers=tokenizer_dir == folder).tokenizer
        _same_vocabulary(ours, theirs, folder, tokenizer_dir, "model's")
        return []
    source = checkpoint.resolve(cfg.init.from_weights)
    if (source / "tokenizer" / "tokenizer.json").is_file():
        theirs = Tokenizer.from_file(str(source / "tokenizer" / "tokenizer.json"))
        _same_vocabulary(ours, theirs, source, source / "tokenizer", "checkpoint's")
    saved = json.loads((source / "model_config.json").read_text())
    ours_cfg = mcfg.model_dump()
    _same_shapes(saved, ours_cfg, source, cfg.init.from_weights)
    return [f"model.{k} is {ours_cfg[k]!r} here but {saved[k]!r} in {source} (init.from_weights): this run continues "
            "another model than the one it starts from" for k in ARCHITECTURE_ONLY if k in saved and saved[k] !=
            ours_cfg.get(k)]


def _same_vocabulary(data_tokenizer: Path, theirs, source: Path, tokenizer_dir: Path, whose: str) -> None:
    """Every token of the source's tokenizer (`theirs`, a `tokenizers.Tokenizer`) has its id in the data's, and both
    normalise and split text alike."""
    import json

    from tokenizers import Tokenizer

    if not data_tokenizer.is_file():
        return
    data = Tokenizer.from_file(str(data_tokenizer))
    vocab = data.get_vocab(with_added_tokens=True)
    wrong = [(t, i) for t, i in theirs.get_vocab(with_added_tokens=True).items() if vocab.get(t) != i]
    repack = f"pack the text with the {whose} tokenizer (`{prepare_command('SRC', tokenizer=tokenizer_dir)}`)"
    where = f"init.from_weights {source}: the data ({data_tokenizer.parent.parent}) was packed with another tokenizer"
    if wrong:
        token, i = min(wrong, key=lambda w: w[1])
        there = f"id {vocab[token]}" if token in vocab else "absent"
        raise EncoderlabError(f"{where}: token {token!r} is id {i} in the {whose} and {there} in the data's "
                              f"({len(wrong):,} tokens differ), so each id would read another token's embedding; "
                              f"{repack}")
    for part in ("normalizer", "pre_tokenizer"):
        mine, its = (json.loads(t.to_str()).get(part) for t in (data, theirs))
        if mine != its:
            raise EncoderlabError(f"{where}: the same vocabulary, but its {part.replace('_', '-')} differs from the "
                                  f"{whose}, so the same text becomes other tokens (e.g. other case or splits); "
                                  f"{repack}")


def positions_short(window: int, positions: int, fix: str | None = None) -> str:
    """Why a model cannot train on windows longer than its positions, and what to do (a study's plan says it too)."""
    return (f"the data's windows have {window} tokens but the model's positions stop at {positions}: "
            f"{fix or 'raise model.max_position_embeddings or repack'}")


def check_compatible(cfg: PretrainConfig, mcfg: ModelConfig | TransformersConfig, meta: dict, phases,
                     world_size: int = 1) -> None:
    """Fail before any work when the data, the model and the objectives cannot go together (or W&B is missing). A
    refusal about a field set in the config names the override, the API's `overrides` or the file that set it."""
    require_wandb(cfg.train.wandb, blamed_field(cfg, "train.wandb").removesuffix(": ") or "train.wandb")
    positions = usable_positions(mcfg)
    if meta["seq_len"] > positions:
        fix = f"repack with {option('seq-len', positions)}" if isinstance(mcfg, TransformersConfig) else None
        raise EncoderlabError(f"{blamed_field(cfg, 'model.max_position_embeddings')}"
                              f"{positions_short(meta['seq_len'], positions, fix)}")
    if isinstance(mcfg, TransformersConfig) and (causal := [o.name for p in phases for o in p.members if o.causal]):
        raise EncoderlabError(f"{blamed_field(cfg, 'objective')}objective {causal[0]}: the {mcfg.model_type} model of "
                              "init.from_weights is a masked-LM model, which attends both ways; continue it with MLM "
                              "phases only (e.g. 'mlm30')")
    uses_mlm = any(isinstance(o, objectives.MLM) for p in phases for o in p.members)
    mask_id = meta["tokenizer"].get("mask_id")
    if uses_mlm and mask_id is None:
        raise EncoderlabError("the schedule uses MLM but the data's tokenizer has no mask token: prepare the data "
                              "again (encoderlab adds a mask token to tokenizers that lack one)")
    if uses_mlm and mask_id >= mcfg.vocab_size:
        raise EncoderlabError(f"{blamed_field(cfg, 'model.vocab_size')}the data's mask token is id {mask_id}, past the "
                              f"model's {mcfg.vocab_size} embeddings (its tokenizer has no mask token of its own): MLM "
                              "would feed an id the model lacks")
    top = packing.max_token_id(meta)
    if top >= mcfg.vocab_size and isinstance(mcfg, TransformersConfig):  # its config.json fixes the vocabulary
        raise EncoderlabError(f"the data's token ids go up to {top}, but the {mcfg.model_type} model of "
                              f"init.from_weights has {mcfg.vocab_size} embeddings: the data's tokenizer is not this "
                              "model's (pack the data with the model's own tokenizer)")
    if top >= mcfg.vocab_size:
        where = blamed_field(cfg, "model.vocab_size")
        raise EncoderlabError(f"{where}the data's token ids go up to {top} but the model's vocabulary has "
                              f"{mcfg.vocab_size} ids{'' if where else ' (model.vocab_size)'}: use at least "
                              f"{top + 1}, or data packed with that vocabulary (its tokenizer has "
                              f"{meta['tokenizer']['vocab_size']} tokens)")
    _check_batches(cfg, meta["seq_len"], world_size)


def _check_batches(cfg: PretrainConfig, seq_len: int, world_size: int) -> None:
    """The global batch splits evenly over the processes, and each process's share into micro-batches."""
    global_batch, micro = cfg.train.sequences_per_step(seq_len), cfg.train.micro_batch
    batch_keys = ("train.global_batch", "train.global_batch_tokens")
    if global_batch % world_size:
        raise EncoderlabError(f"{blamed_field(cfg, *batch_keys)}the global batch of {global_batch} sequences cannot "
                              f"be split evenly over {world_size} processes: use a multiple of {world_size}")
    per_process = global_batch // world_size
    if micro and per_process % micro:
        what = ("the global batch" if world_size == 1 else
                f"the {per_process} sequences of each of the {world_size} processes (global batch {global_batch})")
        raise EncoderlabError(f"{blamed_field(cfg, 'train.micro_batch', *batch_keys)}train.micro_batch={micro} does "
                              f"not divide {what}")
