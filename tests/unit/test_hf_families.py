"""The decoder families as variants of the one backbone (model/config.py): Llama 3.x rope scaling, Mistral's sliding
window, Qwen2's q/k/v biases, Qwen3's q/k norms and head_dim. Each is compared with its transformers class on random
weights (fp32, eager attention), causal and bidirectional (transformers' `is_causal=False` masks); then a saved
transformers folder imports, computes what transformers computes, and exports back bit-identical."""
from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from encoderlab.core.errors import EncoderlabError
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.hub.hf import CLASSES, hf_config
from encoderlab.hub.importer import import_hf
from encoderlab.model.attention import Dense, Flex, Varlen
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM, count_parameters
from encoderlab.runs.checkpoint import load_model

TOL = 1e-4
T = 40  # beyond Mistral's window of 16 and Llama 3's original context of 16
BASE = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 50000.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
VARIANTS = {  # family -> (its ModelConfig fields, the same model with the variant off)
    "llama": ({"rope_scaling": LLAMA3}, {}),
    "mistral": ({"sliding_window": 16}, {}),
    "qwen2": ({"attention_bias": "qkv"}, {}),
    "qwen3": ({"qk_norm": True, "head_dim": 24, "num_attention_heads": 6, "num_key_value_heads": 3},
              {"head_dim": 24, "num_attention_heads": 6, "num_key_value_heads": 3}),
}


def randomised(cfg: ModelConfig, seed: int = 0) -> TransformerLM:
    """Random weights with norms and biases moved off their initial 1 and 0, so a lost one would show."""
    model = TransformerLM(cfg).eval()
    model.init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def transformers_twin(model: TransformerLM, kind: str, causal: bool):
    config = hf_config(model.config, kind)
    config._attn_implementation = "eager"  # an implementation independent of ours
    config.is_causal = causal  # transformers' masks: bidirectional (and the bidirectional window) when False
    hf = getattr(transformers, CLASSES[kind][1])(config).eval()
    hf.load_state_dict(model.state_dict(), strict=True)  # identical names: no renaming
    return hf


def ids(vocab: int, B: int = 2, length: int = T) -> torch.Tensor:
    return torch.randint(0, vocab, (B, length), generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("family", list(VARIANTS))
@torch.no_grad()
def test_each_family_equals_its_transformers_class(family, causal, one_thread):
    on, off = VARIANTS[family]
    ours = randomised(ModelConfig(**{**BASE, **on}))
    x = ids(BASE["vocab_size"])
    hf = transformers_twin(ours, family, causal)(input_ids=x).logits
    diff = (ours(x, causal=causal) - hf).abs().max().item()
    without = TransformerLM(ModelConfig(**{**BASE, **off})).eval()
    without.load_state_dict({k: v for k, v in ours.state_dict().items() if k in without.state_dict()})
    effect = (without(x, causal=causal) - hf).abs().max().item()
    print(f"{family} {'causal' if causal else 'bidirectional'}: max|logit diff| {diff:.1e} (variant off: {effect:.1e})")
    assert diff <= TOL
    assert effect > 10 * TOL  # the variant changes the model: this comparison could fail


@pytest.mark.parametrize("backend", [Dense("eager"), Dense("flash"), Varlen(Dense("flash"), fallback=False), Flex()],
                         ids=["dense-eager", "dense-flash", "varlen", "flex"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@torch.no_grad()
def test_sliding_window_with_packed_documents(backend, causal, one_thread):
    """A packed document computes what it computes alone: the window and the document mask hold together."""
    model = randomised(ModelConfig(**BASE, sliding_window=8))
    x = ids(BASE["vocab_size"], B=1, length=T)
    doc_ids = torch.tensor([[0] * 25 + [1] * 15])
    want = torch.cat([model(x[:, :25], causal=causal), model(x[:, 25:], causal=causal)], dim=1)
    model.model.attention = backend
    got = model(x, causal=causal, doc_ids=doc_ids)
    assert (got - want).abs().max().item() <= TOL


@pytest.mark.parametrize("family", list(VARIANTS))
def test_parameter_count_and_flops_follow_the_variants(family):
    cfg = ModelConfig(**{**BASE, **VARIANTS[family][0]})
    with torch.device("meta"):
        assert count_parameters(TransformerLM(cfg)) == cfg.num_parameters()
        hf = getattr(transformers, CLASSES[family][1])(hf_config(cfg, family))
    assert sum(p.numel() for p in hf.parameters()) == cfg.num_parameters()
    width = cfg.num_attention_heads * cfg.head_size  # Qwen3's 6 x 24 = 144, not the hidden 64
    attention = cfg.flops_per_token(T, causal=False, training=False) - cfg.flops_per_token(1, causal=False,
                                                                                           training=False)
    assert attention == pytest.approx(4 * cfg.num_hidden_layers * width * (T - 1))


def test_variants_off_serialise_as_before():
    """The paper's model_config.json files are unchanged: an off variant is not written."""
    plain = ModelConfig(**BASE)
    assert set(plain.model_dump()) == {*BASE, "max_position_embeddings", "tie_word_embeddings", "initializer_range",
                                       "pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id"}
    for _family, (on, _) in VARIANTS.items():
        cfg = ModelConfig(**{**BASE, **on})
        assert ModelConfig.model_validate(cfg.model_dump()) == cfg
    with pytest.raises(ValueError, match="high_freq_factor=1.0 must exceed low_freq_factor=2.0"):
        ModelConfig(**BASE, rope_scaling={**LLAMA3, "low_freq_factor": 2.0, "high_freq_factor": 1.0})


# ---- import and export of transformers folders --------------------------------------------------------------

SOURCE = {  # family -> transformers config fields of a small source model
    "llama": {"rope_scaling": LLAMA3, "tie_word_embeddings": False},
    "mistral": {"sliding_window": 16, "tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False},
    "qwen3": {"head_dim": 24, "num_attention_heads": 6, "num_key_value_heads": 3, "tie_word_embeddings": True},
}


@pytest.fixture(scope="module")
def tokenizer(synthetic) -> Tokenizer:
    """A byte-level BPE with BOS, EOS and a mask token, so the import adds no row and weights stay comparable; and
    `<|endoftext|>`, which transformers 5's Qwen2Tokenizer adds to the tokenizer of any qwen2 folder."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<mask>", "<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.text for d in synthetic(120)), trainer=trainer)
    return tok


def source_folder(path, family: str, tokenizer: Tokenizer):
    fields = {**BASE, "vocab_size": tokenizer.get_vocab_size(), "bos_token_id": 0, "eos_token_id": 1,
              **SOURCE[family]}
    config = getattr(transformers, CLASSES[family][0])(**fields)
    torch.manual_seed(0)
    hf = getattr(transformers, CLASSES[family][1])(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                p.add_(0.1 * torch.randn(p.shape))  # Qwen2's real biases are not zero
    hf.save_pretrained(str(path))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            mask_token="<mask>").save_pretrained(str(path))
    return hf


@pytest.mark.parametrize("family", list(SOURCE))
@torch.no_grad()
def test_import_computes_like_transformers_and_exports_back_identical(tmp_path, tokenizer, family, one_thread):
    source = source_folder(tmp_path / "source", family, tokenizer)
    summary = import_hf(str(tmp_path / "source"), tmp_path / "ckpt")
    assert summary["added_tokens"] == [] and summary["model_type"] == family
    model, cfg, _ = load_model(tmp_path / "ckpt")
    assert cfg.max_position_embeddings == source.config.max_position_embeddings  # Mistral's is no longer lowered
    x = ids(cfg.vocab_size)
    source.config._attn_implementation = "eager"
    diff = (model(x, causal=True) - source(input_ids=x).logits).abs().max().item()

    export_checkpoint(tmp_path / "ckpt", tmp_path / "export", family)
    native = getattr(transformers, CLASSES[family][1]).from_pretrained(str(tmp_path / "export"),
                                                                      attn_implementation="eager").eval()
    assert type(native.config) is type(source.config)
    back = (native(input_ids=x).logits - source(input_ids=x).logits).abs().max().item()
    print(f"{family}: imported vs transformers {diff:.1e}, export vs source {back:.1e}")
    assert diff <= TOL and back == 0.0
    want, got = load_file(str(tmp_path / "source" / "model.safetensors")), load_file(
        str(tmp_path / "export" / "model.safetensors"))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_exports_refuse_what_their_class_cannot_hold(tmp_path, tokenizer, one_thread):
    source_folder(tmp_path / "qwen3", "qwen3", tokenizer)
    import_hf(str(tmp_path / "qwen3"), tmp_path / "ckpt")
    for kind in ("llama", "eurobert", "mistral", "qwen2"):
        with pytest.raises(EncoderlabError, match=f"--as {kind} cannot hold this model's .*qk_norm=True: export it "
                                                  "--as qwen3"):
            export_checkpoint(tmp_path / "ckpt", tmp_path / kind, kind)
        assert not (tmp_path / kind).exists()


def test_imports_refuse_what_the_backbone_cannot_compute(tmp_path, tokenizer, one_thread):
    def refused(family: str, message: str, **over) -> None:
        source_folder(tmp_path / family, family, tokenizer)
        config = tmp_path / family / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), **over}))
        with pytest.raises(EncoderlabError, match=message):
            import_hf(str(tmp_path / family), tmp_path / "out")

    refused("llama", r"rope_type='yarn'.*plain RoPE and the llama3 scaling",
            rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4})
    refused("qwen2", "sliding window of 16 on 1 of 2 layers", use_sliding_window=True, sliding_window=16,
            layer_types=["full_attention", "sliding_attention"], max_window_layers=1)
