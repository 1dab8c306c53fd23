"""Parity with Hugging Face transformers on random weights, fp32 (docs/architecture.md, convention 2).

Our `TransformerLM` with causal=True must equal `LlamaForCausalLM`, with causal=False `EuroBertForMaskedLM`,
and the bare `Transformer` must equal `LlamaModel` / `EuroBertModel`, when both carry the SAME weights. The
state dict is loaded into HF unchanged (strict): parameter names match, so the mapping is the identity, and
the round trip ours -> HF -> ours is exact. HF runs its eager attention, an implementation independent of our
SDPA path.
"""
from __future__ import annotations

import pytest
import torch
from transformers import (
    EuroBertConfig,
    EuroBertForMaskedLM,
    EuroBertModel,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
)

from encoderlab.hub.hf import hf_config_kwargs
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM

TOL = 1e-4

CONFIGS = {
    # multi-head attention, head_dim 16
    "mha": ModelConfig(
        vocab_size=211, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, rope_theta=10000.0,
    ),
    # grouped-query attention 3:1 like 610m/1b, a non-default theta and eps
    "gqa": ModelConfig(
        vocab_size=173, hidden_size=96, intermediate_size=200, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-6,
    ),
}


def hf_kwargs(cfg: ModelConfig) -> dict:
    # Special ids stay unset: HF's EuroBERT embedding would otherwise zero its padding row at init.
    return {**hf_config_kwargs(cfg), "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def hf_model(cls, config_cls, cfg: ModelConfig, state: dict[str, torch.Tensor]):
    extra = {"mask_token_id": cfg.vocab_size - 1} if config_cls is EuroBertConfig else {}
    config = config_cls(**hf_kwargs(cfg), **extra)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    model.load_state_dict(state, strict=True)  # identical names: no renaming
    return model


def ours(cls, cfg: ModelConfig, seed: int = 0):
    model = cls(cfg).eval()
    model.init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # break the all-ones norms so that a swapped or missing norm would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def inputs(cfg: ModelConfig, B: int = 3, T: int = 17, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, T), generator=g)


def padding_mask(B: int, T: int, left: bool) -> torch.Tensor:
    mask = torch.ones(B, T, dtype=torch.long)
    for b, n_pad in enumerate([0, 3, 7][:B]):
        if n_pad:
            if left:
                mask[b, :n_pad] = 0
            else:
                mask[b, T - n_pad :] = 0
    return mask


CASES = [
    # (our causal flag, HF LM class, HF base class, HF config class)
    pytest.param(True, LlamaForCausalLM, LlamaModel, LlamaConfig, id="llama-causal"),
    pytest.param(False, EuroBertForMaskedLM, EuroBertModel, EuroBertConfig, id="eurobert-bidirectional"),
]


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
@pytest.mark.parametrize(("causal", "hf_lm_cls", "hf_base_cls", "hf_cfg_cls"), CASES)
@torch.no_grad()
def test_lm_logits_and_hidden_match_hf(cfg_name, causal, hf_lm_cls, hf_base_cls, hf_cfg_cls):
    cfg = CONFIGS[cfg_name]
    lm = ours(TransformerLM, cfg)
    ids = inputs(cfg)

    hf_lm = hf_model(hf_lm_cls, hf_cfg_cls, cfg, lm.state_dict())
    diff = (lm(ids, causal=causal) - hf_lm(input_ids=ids).logits).abs().max().item()
    print(f"{cfg_name} {hf_lm_cls.__name__} logits max|diff| = {diff:.2e}")
    assert diff <= TOL

    base_state = lm.model.state_dict()
    hf_base = hf_model(hf_base_cls, hf_cfg_cls, cfg, base_state)
    hidden = lm.model(ids, causal=causal)
    diff = (hidden - hf_base(input_ids=ids).last_hidden_state).abs().max().item()
    print(f"{cfg_name} {hf_base_cls.__name__} hidden max|diff| = {diff:.2e}")
    assert diff <= TOL


@pytest.mark.parametrize("left", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize(("causal", "hf_lm_cls", "hf_base_cls", "hf_cfg_cls"), CASES)
@torch.no_grad()
def test_padding_mask_matches_hf(causal, hf_lm_cls, hf_base_cls, hf_cfg_cls, left):
    cfg = CONFIGS["gqa"]
    lm = ours(TransformerLM, cfg)
    ids = inputs(cfg, T=13)
    mask = padding_mask(*ids.shape, left=left)
    hf_lm = hf_model(hf_lm_cls, hf_cfg_cls, cfg, lm.state_dict())

    got = lm(ids, causal=causal, attention_mask=mask)
    want = hf_lm(input_ids=ids, attention_mask=mask).logits
    assert torch.isfinite(got).all()
    # Real tokens must match. Padding queries carry no meaning and differ by design where they see no key at
    # all (HF: uniform/zero attention, ours: the query sees itself).
    real = mask.bool()
    diff = (got[real] - want[real]).abs().max().item()
    print(f"{hf_lm_cls.__name__} {'left' if left else 'right'} padding, real tokens max|diff| = {diff:.2e}")
    assert diff <= TOL
    # Padding must really be masked: changing the padded tokens changes nothing at real positions.
    ids2 = torch.where(real, ids, (ids + 1) % cfg.vocab_size)
    assert (lm(ids2, causal=causal, attention_mask=mask)[real] - got[real]).abs().max() <= 1e-5


@torch.no_grad()
def test_explicit_position_ids_match_hf():
    cfg = CONFIGS["gqa"]
    lm = ours(TransformerLM, cfg)
    ids = inputs(cfg, B=2, T=9)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11, 12, 13]])
    pairs = [(True, LlamaForCausalLM, LlamaConfig), (False, EuroBertForMaskedLM, EuroBertConfig)]
    for causal, cls, cfg_cls in pairs:
        hf = hf_model(cls, cfg_cls, cfg, lm.state_dict())
        got = lm(ids, causal=causal, position_ids=pos)
        diff = (got - hf(input_ids=ids, position_ids=pos).logits).abs().max().item()
        assert diff <= TOL


@torch.no_grad()
def test_state_dict_round_trip_is_exact():
    cfg = CONFIGS["gqa"]
    lm = ours(TransformerLM, cfg)
    hf = hf_model(EuroBertForMaskedLM, EuroBertConfig, cfg, lm.state_dict())
    ours_keys = set(lm.state_dict())
    assert ours_keys == set(hf.state_dict())
    assert ours_keys == set(hf_model(LlamaForCausalLM, LlamaConfig, cfg, lm.state_dict()).state_dict())

    back = TransformerLM(cfg)
    back.load_state_dict(hf.state_dict(), strict=True)
    for name, p in lm.state_dict().items():
        assert torch.equal(p, back.state_dict()[name]), name
    ids = inputs(cfg)
    assert torch.equal(back(ids, causal=False), lm(ids, causal=False))


@torch.no_grad()
def test_hf_initialised_weights_load_into_ours():
    """The other direction: weights that HF initialised itself give equal logits in our model."""
    cfg = CONFIGS["mha"]
    config = LlamaConfig(**hf_kwargs(cfg))
    config._attn_implementation = "eager"
    torch.manual_seed(3)
    hf = LlamaForCausalLM(config).eval()
    lm = TransformerLM(cfg).eval()
    lm.load_state_dict(hf.state_dict(), strict=True)
    ids = inputs(cfg)
    assert (lm(ids, causal=True) - hf(input_ids=ids).logits).abs().max() <= TOL
