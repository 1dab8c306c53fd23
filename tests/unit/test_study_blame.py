"""A model or training field that a study file sets for its pretraining runs (`pretrain_overrides`,
`size_overrides`, CPT's `optim` and `lr_schedule`) is blamed, when refused, on the study file and its key, not on the
pretraining config file the study names, which never set it."""
from __future__ import annotations

import pickle

import pytest
import yaml

from encoderlab.core.config import ConfigError
from encoderlab.core.errors import EncoderlabError
from encoderlab.pretraining.setup import model_config
from encoderlab.study.plan import build_plan
from encoderlab.study.spec import load_study

TOKENIZER = {"vocab_size": 320, "bos_id": 0, "eos_id": 1, "pad_id": 2, "mask_id": 3}


def study(tmp_path, **keys):
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": "nowhere"}, "model": {"preset": "micro"},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32"}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({"name": "t", "lrs": [1e-3], "seeds": [0]}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "s", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 20,
        "models": [{"sizes": ["micro"], "objectives": ["mlm40"]}],
        "evaluation": {"protocol": "protocol.yaml", "tasks": ["rt-polarity"]},
        "data_shape": {"vocab_size": 320, "seq_len": 64}, **keys}))
    return tmp_path / "study.yaml"


@pytest.mark.parametrize(("keys", "blamed"), [
    ({"pretrain_overrides": {"model": {"num_attention_heads": 5}}}, "pretrain_overrides"),
    ({"size_overrides": {"micro": {"model": {"num_attention_heads": 5}}}}, "size_overrides.micro"),
    ({"pretrain_overrides": {"model": {"num_attention_heads": 4}},
      "size_overrides": {"micro": {"model": {"num_attention_heads": 5}}}}, "size_overrides.micro")])
def test_an_odd_head_width_a_study_sets_is_blamed_on_the_study_file_and_key(tmp_path, keys, blamed):
    file = study(tmp_path, **keys)
    with pytest.raises(ConfigError) as info:
        build_plan(*load_study(file))
    message = str(info.value)
    assert message.startswith(f"{file}: {blamed}: model.num_attention_heads: with preset 'micro', hidden_size=128 "
                              "must be divisible by num_attention_heads=5"), message
    assert "pretrain.yaml" not in message


def test_a_mask_token_a_study_sets_beyond_the_datas_vocabulary_is_blamed_on_the_study_file_once_read(tmp_path):
    file = study(tmp_path, size_overrides={"micro": {"model": {"mask_token_id": 9000}}})
    plan = build_plan(*load_study(file))  # the vocabulary is the data's: known only once the data is read
    [cfg] = plan.configs.values()
    with pytest.raises(ConfigError) as info:  # as a worker process gets it too
        model_config(pickle.loads(pickle.dumps(cfg)), TOKENIZER)
    assert str(info.value).startswith(f"{file}: size_overrides.micro: model.mask_token_id: with preset 'micro' and "
                                      "the data's tokenizer (320 tokens), mask_token_id=9000 is outside the "
                                      "vocabulary"), str(info.value)


def test_a_key_the_pretraining_file_sets_is_still_blamed_on_it(tmp_path):
    file = study(tmp_path, size_overrides={"micro": {"optim": {"lr": 1.0e-3}}})
    config = yaml.safe_load((tmp_path / "pretrain.yaml").read_text())
    config["model"]["num_attention_heads"] = 5
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as info:
        build_plan(*load_study(file))
    assert "pretrain.yaml: model.num_attention_heads: " in str(info.value), str(info.value)
    assert "size_overrides" not in str(info.value)


def test_a_check_across_keys_names_the_value_the_study_file_set(tmp_path):
    file = study(tmp_path, size_overrides={"micro": {"train": {"micro_batch": 3}}})
    with pytest.raises(ConfigError) as info:
        build_plan(*load_study(file))
    assert str(info.value).endswith("train: micro_batch 3 must divide global_batch 4 (train.micro_batch=3 from "
                                    f"{file}: size_overrides.micro)"), str(info.value)


def test_a_budget_shorter_than_the_warmup_names_the_study_s_budget(tmp_path):
    """The run's steps are the study's budget: the refusal is blamed on it, as on `--set train.steps=1` on the
    command line, not on the pretraining file, which never set the steps."""
    file = study(tmp_path, budget=1)
    with pytest.raises(ConfigError) as info:
        build_plan(*load_study(file))
    assert str(info.value).startswith(f"{file}: budget: lr_schedule.warmup_steps=2 is longer than the run "
                                      "(train.steps=1)"), str(info.value)


@pytest.mark.parametrize(("keys", "said"), [
    ({"pretrain_overrides": {"data": {"path": "/nonexistent"}}},
     "pretrain_overrides: data.path: the data '/nonexistent' is not prepared"),
    ({"size_overrides": {"micro": {"data": {"path": "/nonexistent"}}}},
     "size_overrides.micro: data.path: no packed dataset at /nonexistent: create it with ")])
def test_a_data_path_the_study_sets_that_is_not_prepared_is_blamed_on_the_study_file(tmp_path, packed_dir, keys,
                                                                                     said):
    """With the base data prepared (no data_shape), a size's own data.path is checked when planned too: it used to
    be planned with the base data and refused only when its run started, unblamed."""
    file = study(tmp_path, data_shape=None, **keys)
    config = yaml.safe_load((tmp_path / "pretrain.yaml").read_text())
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({**config, "data": {"path": str(packed_dir)}}))
    with pytest.raises(EncoderlabError) as info:
        build_plan(*load_study(file))
    assert str(info.value).startswith(f"{file}: {said}"), str(info.value)


def test_a_data_path_the_study_sets_is_blamed_on_it_when_its_run_starts(tmp_path):
    """Planned from data_shape, the data may be prepared after the plan: a run that finds none names the study file."""
    from encoderlab.pretraining.setup import run_data

    file = study(tmp_path, pretrain_overrides={"data": {"path": str(tmp_path / "none")}})
    [cfg] = build_plan(*load_study(file)).configs.values()
    with pytest.raises(EncoderlabError) as info:  # as a worker process gets it too
        run_data(pickle.loads(pickle.dumps(cfg)))
    assert str(info.value).startswith(f"{file}: pretrain_overrides: data.path: no packed dataset at "
                                      f"{tmp_path / 'none'}: create it with "), str(info.value)
