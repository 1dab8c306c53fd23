"""The CPT presets of configs/studies/cpt-{llama3,mistral,qwen2,qwen3}.yaml plan, unchanged, from a downloaded
model folder at the path they name (`~/models/...`), with that family's variants in every run's model config."""
from __future__ import annotations

from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer, models

from encoderlab.core.config import load_yaml
from encoderlab.model.config import ModelConfig
from encoderlab.study.plan import build_plan
from encoderlab.study.spec import load_study

STUDIES = Path(__file__).resolve().parents[2] / "configs" / "studies"
SHAPE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
# the family's config class, what its source sets, and what the planned model must then have
FAMILIES = {
    "llama3": ("LlamaConfig", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
               lambda cfg: cfg.rope_scaling is not None and cfg.rope_scaling.factor == 8.0),
    "mistral": ("MistralConfig", {"sliding_window": 32}, lambda cfg: cfg.sliding_window == 32),
    "qwen2": ("Qwen2Config", {}, lambda cfg: cfg.attention_bias == "qkv"),
    "qwen3": ("Qwen3Config", {"head_dim": 32}, lambda cfg: cfg.qk_norm and cfg.head_dim == 32),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_cpt_preset_plans_from_the_downloaded_folder(tmp_path, monkeypatch, family):
    class_name, variant, holds = FAMILIES[family]
    study = STUDIES / f"cpt-{family}.yaml"
    source = load_yaml(study)["imported"][family]["source"]
    assert source.startswith("~/models/")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    folder = Path(source).expanduser()
    getattr(transformers, class_name)(**SHAPE, **variant).save_pretrained(folder)
    words = {f"w{i}": i for i in range(SHAPE["vocab_size"] - 2)} | {"<s>": 126, "</s>": 127}
    transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<s>")),
                                         bos_token="<s>", eos_token="</s>").save_pretrained(folder)

    spec, base = load_study(study)
    plan = build_plan(spec, base)
    runs = {name: plan.config(run) for name, run in plan.runs.items()}
    assert len(plan.runs) == 2, plan.runs  # from scratch and CPT
    for config in runs.values():
        fields = {k: v for k, v in config["model"].items() if k != "preset"}
        cfg = ModelConfig(**fields)
        assert cfg.hidden_size == 64 and cfg.num_key_value_heads == 2 and holds(cfg), (family, fields)
    imported = [e for e in plan.evaluations if e.kind == "imported"]
    assert len(imported) == 1 and imported[0].size == family
