"""A size given its own data by `size_overrides` (`data.path`, a folder of another vocabulary and window) is planned
from that data: its model's vocabulary, its windows (so its tokens a step and FLOPs), its epochs and the refusal of a
model vocabulary below the data's. The plan showed the study's base data for that size's runs."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_study import MICRO, plan_of, write_study

from conftest import run_command
from encoderlab.core.config import ConfigError
from encoderlab.data.prepare import PrepareOptions, prepare

WORDS = "the cat sat on a mat while dogs ran across green fields near an old river and people said it".split()


def packed(root: Path, vocab_size: int, seq_len: int) -> Path:
    """A tiny prepared corpus of this vocabulary and window: OUT/packed."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    docs = [{"text": " ".join(rng.choice(WORDS) for _ in range(200))} for _ in range(60)]
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    prepare(str(root / "docs.jsonl"), root / "d", PrepareOptions(vocab_size=vocab_size, seq_len=seq_len,
                                                                 val_fraction=0.1), log=lambda _: None)
    return root / "d" / "packed"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("size-data")
    return packed(root / "base", 320, 64), packed(root / "own", 300, 16)


def meta(folder: Path) -> dict:
    return json.loads((folder / "meta.json").read_text())


def test_a_size_of_its_own_data_is_planned_from_it(tmp_path, data, monkeypatch, capsys):
    base, own = data
    study = write_study(tmp_path, str(base), models=[{"sizes": ["micro", "tiny"], "objectives": ["mlm40"]}],
                        size_overrides={"tiny": {"data": {"path": str(own)}}})
    plan, _ = plan_of(study)
    tiny, micro = plan.runs["tiny-mlm40-20"], plan.runs["micro-mlm40-20"]
    assert tiny.tokens_per_step == 4 * 16 and micro.tokens_per_step == 4 * 64  # global_batch 4, each its windows
    summary = plan.summary()
    assert summary["data"]["path"] == str(base) and summary["data"]["longest_run_tokens"] == 20 * 4 * 64
    shown = summary["size_data"]["tiny"]
    train_tokens = meta(own)["splits"]["train"]["tokens"]
    assert (shown["path"], shown["vocab_size"], shown["seq_len"], shown["train_tokens"]) == \
        (str(own), meta(own)["tokenizer"]["vocab_size"], 16, train_tokens)
    assert shown["epochs"] == float(f"{20 * 4 * 16 / train_tokens:.3g}")
    from encoderlab.model.presets import preset
    from encoderlab.study.plan import _flops
    # the model the run trains: the tiny preset with the pretraining config's model fields (MICRO) over it
    assert tiny.flops == _flops(tiny, 0, preset("tiny", vocab_size=shown["vocab_size"], **MICRO), 16)
    code, out, _ = run_command(monkeypatch, capsys, "study", "plan", study)
    assert code == 0 and f"data tiny prepared {own}: {train_tokens:,} train tokens, vocabulary " \
                         f"{shown['vocab_size']:,}, windows of 16" in " ".join(out.split())


def test_a_model_vocabulary_below_its_own_datas_is_refused_and_above_it_taken(tmp_path, data):
    base, own = data
    vocab, base_vocab = meta(own)["tokenizer"]["vocab_size"], meta(base)["tokenizer"]["vocab_size"]
    assert vocab < base_vocab
    study = write_study(tmp_path, str(base), size_overrides={
        "micro": {"data": {"path": str(own)}, "model": {"vocab_size": vocab - 1}}})
    with pytest.raises(ConfigError, match=rf"study.yaml: size_overrides\.micro: model\.vocab_size: {vocab - 1} is "
                                          rf"fewer than the data's {vocab} tokens \({own}\)"):
        plan_of(study)
    study = write_study(tmp_path, str(base), size_overrides={  # under the base data's, but its own data's suffice
        "micro": {"data": {"path": str(own)}, "model": {"vocab_size": vocab}}})
    assert plan_of(study)[0].configs["micro-mlm40-20"].data.path == str(own)


def test_a_sizes_model_overrides_are_planned_with_it(tmp_path, data):
    """A size's model settings (size_overrides' `model`, here twice micro's layers and a vocabulary above the
    data's) are the model its runs train: the plan's FLOPs count that model, not the bare preset."""
    from encoderlab.model.presets import preset
    from encoderlab.study.plan import _flops
    base, _ = data
    layers = 2 * MICRO["num_hidden_layers"]
    study = write_study(tmp_path, str(base), models=[{"sizes": ["micro"], "objectives": ["mlm40"]}],
                        size_overrides={"micro": {"model": {"num_hidden_layers": layers, "vocab_size": 512}}})
    plan, _ = plan_of(study)
    run = plan.runs["micro-mlm40-20"]
    assert run.flops == _flops(run, 0, preset("micro", **{**MICRO, "vocab_size": 512, "num_hidden_layers": layers}), 64)


def _preset_only(tmp_path: Path, name: str) -> None:
    """The study's pretraining config with only a preset (no shape field), so that each size's preset shows."""
    import yaml
    config = tmp_path / "pretrain.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "model": {"preset": name}}))


def test_a_sizes_model_overrides_are_checked_on_its_own_preset(tmp_path):
    """tiny's 4 heads take 4 KV heads: the study's base preset (micro, 2 heads) is not the model tiny's runs train,
    and the plan refused it as 'with preset micro'."""
    from encoderlab.model.presets import preset
    from encoderlab.study.plan import _flops
    study = write_study(tmp_path, "nowhere", models=[{"sizes": ["tiny"], "objectives": ["mlm40"]}],
                        size_overrides={"tiny": {"model": {"num_key_value_heads": 4}}})
    _preset_only(tmp_path, "micro")
    plan, _ = plan_of(study)
    run = plan.runs["tiny-mlm40-20"]
    assert run.flops == _flops(run, 0, preset("tiny", vocab_size=320, num_key_value_heads=4), 64)


def test_a_sizes_model_override_its_preset_refuses_is_blamed_on_the_study_file(tmp_path):
    """Valid on the base preset (tiny: 4 heads), not on the size's own (micro: 2): blamed on the study file's
    section, not on `model (preset 'micro')` with no file."""
    study = write_study(tmp_path, "nowhere", models=[{"sizes": ["micro"], "objectives": ["mlm40"]}],
                        size_overrides={"micro": {"model": {"num_key_value_heads": 4}}})
    _preset_only(tmp_path, "tiny")
    with pytest.raises(ConfigError, match=r"/study\.yaml: size_overrides\.micro: model\.num_key_value_heads: with "
                                          r"preset 'micro', num_attention_heads=2 must be divisible"):
        plan_of(study)


def test_the_study_model_settings_are_checked_on_the_sizes_it_trains(tmp_path):
    """4 KV heads for every size (pretrain_overrides) of a study that trains tiny alone: the pretraining config's
    preset (micro, 2 heads) trains no run, and the plan refused it as 'with preset micro'."""
    study = write_study(tmp_path, "nowhere", models=[{"sizes": ["tiny"], "objectives": ["mlm40"]}],
                        pretrain_overrides={"model": {"num_key_value_heads": 4}})
    _preset_only(tmp_path, "micro")
    assert plan_of(study)[0].configs["tiny-mlm40-20"].model.model_extra["num_key_value_heads"] == 4


def test_a_size_whose_positions_stop_before_its_windows_is_refused_at_plan(tmp_path, data):
    """`max_position_embeddings` below the data's windows (here 16 against 64) was planned; its run then refused
    it at its start, after the study had begun."""
    base, _ = data
    study = write_study(tmp_path, str(base), models=[{"sizes": ["micro"], "objectives": ["mlm40"]}],
                        size_overrides={"micro": {"model": {"max_position_embeddings": 16}}})
    with pytest.raises(ConfigError) as info:
        plan_of(study)
    assert str(info.value) == (f"{study}: size_overrides.micro: model.max_position_embeddings: the data's windows "
                               f"have 64 tokens but the model's positions stop at 16: raise "
                               "model.max_position_embeddings or repack"), str(info.value)


@pytest.mark.parametrize("field", ["mask_token_id", "pad_token_id"])
def test_a_sizes_token_id_past_its_datas_vocabulary_is_refused_at_plan(tmp_path, data, field):
    """A special token id past the data's vocabulary set for one size was planned (ids count no FLOP); its run
    then refused it at its start, after the study had begun. The other sizes' own data is checked alike."""
    base, own = data
    study = write_study(tmp_path, str(base), models=[{"sizes": ["micro", "tiny"], "objectives": ["mlm40"]}],
                        size_overrides={"tiny": {"data": {"path": str(own)}, "model": {field: 310}}})
    with pytest.raises(ConfigError) as info:
        plan_of(study)
    vocab = meta(own)["tokenizer"]["vocab_size"]
    assert str(info.value) == (f"{study}: size_overrides.tiny: model.{field}: with preset 'tiny' and the data's "
                               f"tokenizer ({vocab} tokens), {field}=310 is outside the vocabulary "
                               f"(vocab_size={vocab})"), str(info.value)
