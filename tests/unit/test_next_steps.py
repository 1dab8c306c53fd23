"""`data prepare` ends naming the command to run next, as it can be pasted where the user is: pretraining on the
data (the README's path), or, after a shard, the join."""
from __future__ import annotations

import json
import shlex

from pathlib import Path

import pytest

from encoderlab.cli.data import _after_prepare
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS
from encoderlab.runs.folder_checks import check_encoder_kind


def test_the_next_command_names_a_config_that_exists_from_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside a clone: the shipped config's path in the package
    demo = CONFIGS / "pretrain" / "demo-tiny.yaml"
    offline = {"packed": str(tmp_path / "home" / "data" / "offline" / "packed")}
    assert _after_prepare("offline", None, offline, None) == (
        f"encoderlab pretrain {shlex.quote(str(demo))} (data.path: offline is this data), or encoderlab demo (the "
        "demo study)")
    mini = CONFIGS / "pretrain" / "mini-mlm40.yaml"
    mine = {"packed": "data/my corpus/packed"}
    assert _after_prepare("c.jsonl", tmp_path / "d", mine, None) == (
        f"encoderlab pretrain {shlex.quote(str(mini))} --set 'data.path=data/my corpus/packed'")
    assert _after_prepare("offline", tmp_path / "d", mine, None) == (
        f"encoderlab pretrain {shlex.quote(str(demo))} --set 'data.path=data/my corpus/packed'")
    (tmp_path / "configs" / "pretrain").mkdir(parents=True)  # a clone's root, or the configs copied here
    (tmp_path / "configs" / "pretrain" / "demo-tiny.yaml").write_text("")
    assert _after_prepare("offline", None, offline, None).startswith(
        "encoderlab pretrain configs/pretrain/demo-tiny.yaml (")


def test_after_a_shard_the_join_is_next():
    shard = {"shard": "3/8", "root": "/data/out", "parts": "/data/out/parts"}
    assert _after_prepare("/src/*.parquet", None, shard, "tok.json") == (
        "once all 8 shards have run, encoderlab data prepare '/src/*.parquet' --out /data/out --tokenizer tok.json "
        "--join 8")


def _model_folder(folder, model_type: str):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(f'{{"model_type": "{model_type}"}}')
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_after_a_models_tokenizer_continued_pretraining_of_that_model_is_next(tmp_path, monkeypatch):
    """It suggested a from-scratch model (mini-mlm40.yaml), whose `model:` section `init.from_weights` of a
    transformers model refuses: data packed with a model's tokenizer is for continuing that model."""
    monkeypatch.chdir(tmp_path)
    cpt = shlex.quote(str(CONFIGS / "pretrain" / "cpt-encoder.yaml"))
    _model_folder(tmp_path / "models" / "bert", "bert")
    packed = {"packed": "data/mine/packed"}
    for given, model in [("models/bert", "models/bert"), ("models/bert/tokenizer.json", "models/bert"),
                         ("minilm-l6", "minilm-l6")]:
        assert _after_prepare("c.jsonl", None, packed, given) == (
            f"encoderlab pretrain {cpt} --set data.path=data/mine/packed --set init.from_weights={model}"), given
    assert _after_prepare("offline", tmp_path / "d", packed, "minilm-l6").startswith(f"encoderlab pretrain {cpt} ")


def test_a_tokenizer_of_nothing_to_continue_still_leads_to_a_model_from_scratch(tmp_path, monkeypatch):
    """A tokenizer alone, or that of a model pretraining cannot continue (a GPT-2 decoder, a T5 encoder-decoder),
    whose own model the line says is not continued, and why: the data is for a model of its own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    _model_folder(tmp_path / "gpt2", "gpt2")
    _model_folder(tmp_path / "t5", "t5")
    mini = shlex.quote(str(CONFIGS / "pretrain" / "mini-mlm40.yaml"))
    for given in ("tok", "tok/tokenizer.json"):
        assert _after_prepare("c.jsonl", None, {"packed": "p"}, given) == (
            f"encoderlab pretrain {mini} --set data.path=p")
    # the folder's own model: said why it is not continued, in the words continued pretraining refuses it with
    for given, folder in (("gpt2", "gpt2"), ("t5/tokenizer.json", "t5")):
        with pytest.raises(EncoderlabError) as refused:
            check_encoder_kind(json.loads((tmp_path / folder / "config.json").read_text()), Path(folder))
        why = str(refused.value).removeprefix(f"{folder}: ").split("; encoderlab takes ")[0]  # the reason alone
        assert _after_prepare("c.jsonl", None, {"packed": "p"}, given) == (
            f"encoderlab pretrain {mini} --set data.path=p (a new model of this vocabulary: {folder}'s own model "
            f"cannot be continued: {why})")
    assert "is a decoder" in _after_prepare("c.jsonl", None, {"packed": "p"}, "gpt2")
    assert "encoderlab takes" not in _after_prepare("c.jsonl", None, {"packed": "p"}, "gpt2")  # a line, not a list
    assert "is an encoder-decoder" in _after_prepare("c.jsonl", None, {"packed": "p"}, "t5")


def test_a_decoder_continues_from_its_import(tmp_path, monkeypatch):
    """A Llama-family folder is continued on encoderlab's own backbone, which pretraining reaches only through an
    import (`init.from_weights` of the folder itself is refused, naming import-hf)."""
    monkeypatch.chdir(tmp_path)
    _model_folder(tmp_path / "smollm2", "llama")
    assert _after_prepare("c.jsonl", None, {"packed": "p"}, "smollm2") == (
        "encoderlab import-hf smollm2 --out ckpts/smollm2 (a llama model is continued on encoderlab's own backbone, "
        "from its import: pack the corpus with --tokenizer ckpts/smollm2/tokenizer, then pretrain with "
        "init.from_weights: ckpts/smollm2, docs/hf.md)")


def test_the_import_is_named_after_the_model_folder_given_as_the_current_one(tmp_path, monkeypatch):
    monkeypatch.chdir(_model_folder(tmp_path / "smollm2", "llama"))
    assert _after_prepare("c.jsonl", None, {"packed": "p"}, "tokenizer.json").startswith(
        "encoderlab import-hf . --out ckpts/smollm2 (")


def test_an_encoderlab_checkpoints_tokenizer_continues_it_with_its_shapes(tmp_path, monkeypatch):
    """It suggested cpt-encoder.yaml with init.from_weights alone, whose model (the default preset) the
    checkpoint's weights do not fit: `checkpoint ckpts/smollm2 does not fit the configured model: unexpected
    model.layers.10...`. The next command sets the checkpoint's shapes, and it validates as a config."""
    from encoderlab.core.config import load_config
    from encoderlab.pretraining.config import PretrainConfig

    monkeypatch.chdir(tmp_path)
    shapes = {"vocab_size": 49153, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
              "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
              "rope_theta": 100000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "initializer_range": 0.02,
              "pad_token_id": 2, "bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 49152}
    (tmp_path / "ckpts" / "smol" / "tokenizer").mkdir(parents=True)
    (tmp_path / "ckpts" / "smol" / "state.json").write_text("{}")
    (tmp_path / "ckpts" / "smol" / "model_config.json").write_text(json.dumps(shapes))
    cpt = CONFIGS / "pretrain" / "cpt-encoder.yaml"
    for given in ("ckpts/smol", "ckpts/smol/tokenizer"):
        line = _after_prepare("c.jsonl", None, {"packed": "p"}, given)
        assert line == (
            f"encoderlab pretrain {shlex.quote(str(cpt))} --set data.path=p --set init.from_weights=ckpts/smol "
            "--set model.hidden_size=576 --set model.intermediate_size=1536 --set model.num_hidden_layers=30 "
            "--set model.num_attention_heads=9 --set model.num_key_value_heads=3 "
            "--set model.max_position_embeddings=8192 --set model.rope_theta=100000.0 --set model.rms_norm_eps=1.0e-05 "
            "--set model.tie_word_embeddings=true"), given
        sets = [part for part in shlex.split(line)[3:] if part != "--set"]
        cfg = load_config(PretrainConfig, cpt, sets, str(cpt))
        assert cfg.model.model_extra["rms_norm_eps"] == 1e-05 and cfg.model.model_extra["num_hidden_layers"] == 30
