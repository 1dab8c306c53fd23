"""Meaning of the objectives: which tokens MLM may mask, how they are corrupted, that labels are -100 elsewhere,
that CLM labels shift within documents only, and that the sparse-head loss equals a dense reference."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import encoderlab.model.transformer as transformer_module
from encoderlab.core.errors import EncoderlabError
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.pretraining.objectives import CLM, IGNORE_INDEX, MLM, Vocab, loss_sums

BOS, EOS, PAD, MASK = 0, 1, 2, 3
SPECIALS = [BOS, EOS, PAD, MASK]
V = 1000
DATA_SEED = 10_000  # data and masks must not share a random stream, or masks correlate with the data


def gen(seed: int = 0, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def tokens(B: int, T: int, seed: int = 0, vocab: int = V, special_share: float = 0.0) -> torch.Tensor:
    """Random ordinary ids, with a share of bos/eos/pad/mask scattered in."""
    g = gen(DATA_SEED + seed)
    x = torch.randint(len(SPECIALS), vocab, (B, T), generator=g)
    if special_share:
        spot = torch.rand(B, T, generator=g) < special_share
        x = torch.where(spot, torch.randint(0, len(SPECIALS), (B, T), generator=g), x)
    return x


def mlm(x: torch.Tensor, rate: float = 0.4, seed: int = 0, strategy: str = "mask", vocab: int = V):
    return MLM(rate, strategy).prepare(x, torch.zeros_like(x), Vocab(vocab, MASK, tuple(SPECIALS)),
                                       gen(seed, x.device.type))  # type: ignore[arg-type]


def clm(x: torch.Tensor, docs: torch.Tensor):
    return CLM().prepare(x, docs, Vocab(V, MASK, tuple(SPECIALS)), None)


def packed(B: int, T: int, seed: int = 0, vocab: int = V) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of several `<bos> ... <eos>` documents; the first and last of a row may be cut."""
    g = gen(DATA_SEED + seed)
    ids = torch.randint(len(SPECIALS), vocab, (B, T), generator=g)
    docs = torch.zeros(B, T, dtype=torch.int64)
    for b in range(B):
        t, d = -int(torch.randint(0, 4, (1,), generator=g)), 0  # the row may open mid-document
        while t < T:
            n = int(torch.randint(2, 9, (1,), generator=g))
            lo, hi = max(t, 0), min(t + n, T)
            docs[b, lo:hi] = d + 100 * b
            if t >= 0:
                ids[b, t] = BOS
            if t + n - 1 < T:
                ids[b, t + n - 1] = EOS
            t, d = t + n, d + 1
    return ids, docs


CFG = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


def model(dtype: torch.dtype = torch.float32) -> TransformerLM:
    m = TransformerLM(CFG).to(dtype)
    m.init_weights(0)
    return m


def loss_of(m: TransformerLM, x, docs, objective, seed: int = 0):
    return loss_sums(m, x, docs, objective, Vocab(CFG.vocab_size, MASK, tuple(SPECIALS)), gen(seed))


# ---- objectives as data ------------------------------------------------------------------------------------


def test_names_and_causality():
    assert (MLM().name, MLM(0.2).name, MLM(0.3).name, MLM(0.5).name) == ("mlm40", "mlm20", "mlm30", "mlm50")
    assert MLM(0.15, "80-10-10").name == "mlm15_801010"
    assert MLM(0.125).name == "mlm12.5"
    assert CLM().name == "clm"
    assert MLM().causal is False and CLM().causal is True


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1, 1.5, float("nan"), "0.4", True])
def test_mask_rate_outside_open_interval_is_refused(rate):
    with pytest.raises(EncoderlabError, match="mask_rate") as info:
        MLM(rate)
    assert isinstance(info.value, ValueError)


def test_unknown_strategy_is_refused():
    with pytest.raises(EncoderlabError, match="80-10-10"):
        MLM(0.4, "random")  # type: ignore[arg-type]


# ---- MLM ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.2, 0.4, 0.5])
def test_empirical_mask_rate(rate):
    x = tokens(100, 1000, special_share=0.1)  # 100k tokens, ~10% special
    out = mlm(x, rate)
    selected = out.labels != IGNORE_INDEX
    eligible = x >= len(SPECIALS)
    measured = selected.sum().item() / eligible.sum().item()
    assert abs(measured - rate) < 0.01  # binomial std ~0.0017 over 90k eligible tokens


def test_special_tokens_are_never_masked():
    x = tokens(50, 400, special_share=0.6)  # most of the input is bos/eos/pad/mask
    for strategy in ("mask", "80-10-10"):
        out = mlm(x, 0.5, strategy=strategy)
        special = x < len(SPECIALS)
        assert special.sum() > 10_000
        assert (out.labels[special] == IGNORE_INDEX).all()
        assert (out.input_ids[special] == x[special]).all()  # specials are left exactly as they were
        assert (out.labels != IGNORE_INDEX).sum() > 1000


def test_labels_are_the_original_at_masked_positions_and_minus_100_elsewhere():
    x = tokens(8, 256, special_share=0.2)
    out = mlm(x, 0.4)
    selected = out.labels != IGNORE_INDEX
    assert (out.labels[selected] == x[selected]).all()
    assert (out.labels[~selected] == IGNORE_INDEX).all()
    # "mask": the corrupted input is the mask id exactly at the selected positions, the original elsewhere
    assert torch.equal(out.input_ids == MASK, selected | (x == MASK))
    assert (out.input_ids[selected] == MASK).all()
    assert torch.equal(out.input_ids[~selected], x[~selected])
    assert torch.equal(x, tokens(8, 256, special_share=0.2))  # the batch itself is not modified


def test_positions_are_sorted_and_match_labels():
    x = tokens(4, 300, special_share=0.2)
    for out in (mlm(x), clm(*packed(4, 300))):
        flat = out.labels.flatten()
        assert out.positions.dtype == torch.int64 and out.positions.dim() == 1
        assert (out.positions[1:] > out.positions[:-1]).all()
        assert torch.equal(out.positions, (flat != IGNORE_INDEX).nonzero().squeeze(1))
        assert torch.equal(out.targets, flat[out.positions])
        assert (out.targets != IGNORE_INDEX).all()


def test_80_10_10_proportions_and_random_tokens_never_special():
    x = tokens(100, 1000, special_share=0.1)
    out = mlm(x, 0.4, strategy="80-10-10")
    selected = out.labels != IGNORE_INDEX
    n = selected.sum().item()
    got, orig = out.input_ids[selected], x[selected]
    masked = (got == MASK).sum().item() / n
    random = ((got != MASK) & (got != orig)).sum().item() / n
    kept = (got == orig).sum().item() / n
    # ~36k selected tokens: std of the 10% shares ~0.0016; a random draw equals the original with p = 1/996
    assert abs(masked - 0.8) < 0.01
    assert abs(random - 0.1) < 0.01
    assert abs(kept - 0.1) < 0.01
    assert not (got[got != MASK] < len(SPECIALS)).any()
    assert (out.input_ids[~selected] == x[~selected]).all()


def test_80_10_10_random_tokens_cover_the_non_special_vocabulary_uniformly():
    vocab, specials = 20, [0, 5, 7, 19]  # specials scattered through the vocabulary, not just a prefix
    x = torch.randint(0, vocab, (200, 1000), generator=gen(DATA_SEED))
    out = MLM(0.5, "80-10-10").prepare(x, torch.zeros_like(x), Vocab(vocab, 7, tuple(specials)), gen(2))
    selected = out.labels != IGNORE_INDEX
    random = out.input_ids[selected & (out.input_ids != 7) & (out.input_ids != x)]
    assert not torch.isin(random, torch.tensor(specials)).any()
    counts = torch.bincount(random, minlength=vocab).float()
    allowed = torch.tensor([i for i in range(vocab) if i not in specials])
    # Originals and replacements are both uniform over the 16 non-special ids, so among the draws that changed
    # the token every id keeps share 1/16; ~7.5k such draws: std ~0.003 per id.
    share = counts[allowed] / counts.sum()
    assert (share - 1 / 16).abs().max() < 0.015
    assert (counts[specials] == 0).all()


def test_same_seed_same_masks_different_seed_different_masks():
    x = tokens(4, 512, special_share=0.1)
    for strategy in ("mask", "80-10-10"):
        a, b, c = mlm(x, seed=7, strategy=strategy), mlm(x, seed=7, strategy=strategy), mlm(x, seed=8,
                                                                                               strategy=strategy)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
        assert torch.equal(a.positions, b.positions)
        assert not torch.equal(a.labels, c.labels)


def test_mask_id_missing_from_special_ids_is_still_never_selected():
    x = torch.full((10, 100), MASK)
    out = MLM(0.5).prepare(x, torch.zeros_like(x), Vocab(V, MASK, (BOS,)), gen())
    assert out.positions.numel() == 0


def test_bad_arguments_are_refused():
    x = tokens(2, 10)
    docs = torch.zeros_like(x)
    with pytest.raises(EncoderlabError, match="outside the vocabulary"):
        MLM(0.4).prepare(x, docs, Vocab(V, V, tuple(SPECIALS)), gen())
    with pytest.raises(EncoderlabError, match="no mask token|has none"):
        MLM(0.4).prepare(x, docs, Vocab(V, None, (BOS, EOS)), gen())
    with pytest.raises(EncoderlabError, match="special"):
        MLM(0.4).prepare(x, docs, Vocab(4, 3, (0, 1, 2, 3)), gen())


# ---- CLM ---------------------------------------------------------------------------------------------------


def test_clm_labels_are_the_next_token_of_the_same_document():
    x, docs = packed(6, 120)
    assert all(len(docs[b].unique()) >= 10 for b in range(6))  # many documents per row
    out = clm(x, docs)
    assert torch.equal(out.input_ids, x)
    assert (out.labels[:, -1] == IGNORE_INDEX).all()
    same = docs[:, 1:] == docs[:, :-1]
    assert torch.equal(out.labels[:, :-1][same], x[:, 1:][same])
    assert (out.labels[:, :-1][~same] == IGNORE_INDEX).all()
    # every boundary is an <eos> that would otherwise predict the next document's <bos>: it predicts nothing
    assert (x[:, :-1][~same] == EOS).all() and (x[:, 1:][~same] == BOS).all()
    assert (out.labels != BOS).all()
    assert (~same).sum() >= 60


def test_clm_hand_built_example():
    x = torch.tensor([[BOS, 10, 11, EOS, BOS, 12, EOS, BOS, 13]])
    docs = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2, 2]])
    out = clm(x, docs)
    assert out.labels.tolist() == [[10, 11, EOS, -100, 12, EOS, -100, 13, -100]]
    assert out.positions.tolist() == [0, 1, 2, 4, 5, 7]
    assert out.targets.tolist() == [10, 11, EOS, 12, EOS, 13]


# ---- loss --------------------------------------------------------------------------------------------------


def dense_reference(m, x, docs, objective, seed: int = 0):
    inputs = objective.prepare(x, docs, Vocab(CFG.vocab_size, MASK, tuple(SPECIALS)), gen(seed))
    logits = m(inputs.input_ids, causal=objective.causal, doc_ids=docs)  # (B, T, V): every position
    labels = inputs.labels
    loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    hit = (logits.argmax(-1) == labels)[labels != IGNORE_INDEX]
    return loss, hit.float().mean(), (labels != IGNORE_INDEX).sum()


@pytest.mark.parametrize("objective", [MLM(0.4), MLM(0.2, "80-10-10"), CLM()], ids=lambda o: o.name)
def test_loss_sums_equal_dense_reference(objective):
    m = model()
    x, docs = packed(3, 64, vocab=CFG.vocab_size)
    sums = loss_of(m, x, docs, objective, seed=3)
    ref, acc, n = dense_reference(m, x, docs, objective, seed=3)
    assert sums.loss.dtype == torch.float32 and sums.loss.dim() == 0 and sums.loss.requires_grad
    assert torch.equal(sums.tokens, n) and n > 20
    assert abs(sums.loss.item() - ref.item() * n.item()) < 1e-5 * n.item()  # a sum over the tokens, not a mean
    assert sums.correct.item() == round(acc.item() * n.item()) and not sums.correct.requires_grad


def test_mlm_lm_head_runs_only_at_masked_positions():
    """The sparse head: the vocabulary projection sees only the masked rows, so unmasked logits are never
    computed and cannot enter the loss."""
    m = model()
    x, docs = packed(3, 64, vocab=CFG.vocab_size)
    seen: list[tuple[int, ...]] = []
    real = transformer_module.fused_linear_cross_entropy

    def spy(h, weight, targets):  # the head's projection and loss get only the masked rows
        seen.append(tuple(h.shape))
        return real(h, weight, targets)

    transformer_module.fused_linear_cross_entropy = spy
    try:
        sums = loss_of(m, x, docs, MLM(0.4))
    finally:
        transformer_module.fused_linear_cross_entropy = real
    n = int(sums.tokens)
    assert 0 < n < x.numel() // 2
    assert seen == [(n, CFG.hidden_size)]
    # Poisoning the logits at every unmasked position of the dense output leaves the reference loss unchanged,
    # and the sparse loss equals it.
    inputs = MLM(0.4).prepare(x, docs, Vocab(CFG.vocab_size, MASK, tuple(SPECIALS)), gen())
    logits = m(inputs.input_ids, causal=False, doc_ids=docs)
    unmasked = inputs.labels == IGNORE_INDEX
    poisoned = torch.where(unmasked[..., None], torch.full_like(logits, 1e4), logits)
    ref = F.cross_entropy(poisoned.flatten(0, 1), inputs.labels.flatten(), ignore_index=IGNORE_INDEX)
    assert abs(sums.loss.item() / n - ref.item()) < 1e-5


def test_loss_is_fp32_under_bf16_logits():
    m = model(torch.bfloat16)
    x, docs = packed(2, 48, vocab=CFG.vocab_size)
    for objective in (MLM(0.4), CLM()):
        sums = loss_of(m, x, docs, objective)
        assert sums.loss.dtype == torch.float32
        inputs = objective.prepare(x, docs, Vocab(CFG.vocab_size, MASK, tuple(SPECIALS)), gen())
        logits = m(inputs.input_ids, causal=objective.causal, doc_ids=docs, output_positions=inputs.positions)
        assert logits.dtype == torch.bfloat16
        # fp32 statistics: off by the rounding of one bf16 probability per row at most (model/lm_loss.py), where a
        # bf16 log-softmax would be off by ~1e-2.
        mean = sums.loss.item() / sums.tokens.item()
        assert abs(mean - F.cross_entropy(logits.float(), inputs.targets).item()) < 2**-8


@pytest.mark.parametrize("objective", [MLM(0.4), CLM()], ids=lambda o: o.name)
def test_gradient_flows_to_every_parameter(objective):
    m = model()
    x, docs = packed(2, 48, vocab=CFG.vocab_size)
    loss_of(m, x, docs, objective).loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_nothing_to_predict_gives_zero_loss_not_nan():
    m = model()
    x = torch.full((2, 16), PAD)
    docs = torch.arange(32).view(2, 16)  # every token its own document: CLM has no target either
    for objective in (MLM(0.4), CLM()):
        sums = loss_of(m, x, docs, objective)
        assert sums.loss.item() == 0.0 and sums.tokens.item() == 0 and sums.correct.item() == 0
        sums.loss.backward()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generator_masks_on_device_and_loss_matches_cpu():
    x = tokens(4, 256, special_share=0.1).cuda()
    a, b = mlm(x, seed=5), mlm(x, seed=5)
    assert a.input_ids.is_cuda and a.positions.is_cuda and torch.equal(a.labels, b.labels)
    out = mlm(x, seed=5, strategy="80-10-10")
    assert not (out.input_ids[(out.labels != IGNORE_INDEX) & (out.input_ids != MASK)] < len(SPECIALS)).any()
    m = model().cuda()
    xs, docs = packed(2, 64, vocab=CFG.vocab_size)
    sums = loss_sums(m, xs.cuda(), docs.cuda(), CLM(), Vocab(CFG.vocab_size, MASK, tuple(SPECIALS)), gen(0, "cuda"))
    ref = loss_of(model(), xs, docs, CLM())
    assert abs(sums.loss.item() - ref.loss.item()) < 1e-4 * ref.tokens.item()
