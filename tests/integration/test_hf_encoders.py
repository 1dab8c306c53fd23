"""The decoder-to-encoder route for every family: a tiny random Llama-3 (llama3 rope scaling), Mistral (window 8),
Qwen2 (non-zero q/k/v biases) and Qwen3 (q/k norms) folder is imported, trained a few MLM steps, and exported as an
encoder: the family's bare `*Model` with `is_causal: false`, whose AutoModel hidden states equal encoderlab's
bidirectional forward (padded batch, longer than the window; for the windowed model also encoderlab's packed
window), whose first token sees the last, and whose sentence-transformers folder embeds as the retrieval
evaluation does. The causal export stays available by asking for it."""
from __future__ import annotations

import json
import re

import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModel, AutoModelForSequenceClassification, PreTrainedTokenizerFast

from encoderlab.core.counts import parameters_text
from encoderlab.core.errors import EncoderlabError
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.hub.hf import CLASSES
from encoderlab.hub.importer import import_hf
from encoderlab.runs.checkpoint import load_model
from encoderlab.tasks.bi_encoder import encode

TOL = 1e-5
SHAPE = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "max_position_embeddings": 64,
         "tie_word_embeddings": False}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 50000.0}
FAMILIES = {"llama": {"rope_parameters": LLAMA3}, "mistral": {"sliding_window": 8}, "qwen2": {},
            "qwen3": {"head_dim": 24, "num_attention_heads": 6, "num_key_value_heads": 3, "tie_word_embeddings": True}}
T = 20  # beyond Mistral's window of 8


@pytest.fixture(scope="module")
def tokenizer(synthetic) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.text for d in synthetic(80)), trainer=trainer)
    return tok


def source_folder(path, family: str, tokenizer: Tokenizer) -> None:
    """A random transformers decoder of `family`, norms and biases moved off 1 and 0 so a lost one would show."""
    n = tokenizer.get_vocab_size() + (1 if family == "qwen2" else 0)  # room for Qwen2Tokenizer's <|endoftext|>
    config = getattr(transformers, CLASSES[family][0])(vocab_size=n, bos_token_id=0, eos_token_id=1,
                                                      **{**SHAPE, **FAMILIES[family]})
    torch.manual_seed(0)
    hf = getattr(transformers, CLASSES[family][1])(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                p.add_(0.1 * torch.randn(p.shape))
    hf.save_pretrained(str(path))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>").save_pretrained(str(path))


def continued(root, family: str, tokenizer: Tokenizer, synthetic):
    """import -> 2 MLM steps from the imported weights: the checkpoint a user exports."""
    from encoderlab.core.config import validate
    from encoderlab.data.packing import pack
    from encoderlab.data.tokenizer import load_tokenizer
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    source_folder(root / "source", family, tokenizer)
    import_hf(str(root / "source"), root / "import")
    pack(synthetic(40), load_tokenizer(root / "import" / "tokenizer"), root / "data", seq_len=32)
    shape = json.loads((root / "import" / "model_config.json").read_text())
    cfg = validate(PretrainConfig, {
        "name": "cpt", "out_dir": str(root), "data": {"path": str(root / "data")},
        "model": {"preset": "tiny", **shape}, "objective": "mlm40", "init": {"from_weights": str(root / "import")},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1},
    }, "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run()
    return root / "cpt" / "checkpoints" / "step-0000002"


@pytest.fixture(scope="module", params=list(FAMILIES))
def route(request, tmp_path_factory, tokenizer, synthetic, one_thread):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    ckpt = continued(root, family, tokenizer, synthetic)
    model, cfg, tok = load_model(ckpt)
    return family, ckpt, model.eval(), tok, root


def padded_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, vocab - 1, (2, T), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0  # right padding, as the exported tokenizer pads
    return ids, mask


@torch.no_grad()
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_encoder_export_equals_encoderlab_bidirectional(route, implementation):
    family, ckpt, model, tok, root = route
    out = root / f"encoder-{implementation}"
    summary = export_checkpoint(ckpt, out, family)  # last trained with MLM: bidirectional by default
    assert summary["class"] == CLASSES[family][1].replace("ForCausalLM", "Model") and summary["note"] is None
    assert summary["attention"] == "bidirectional"
    config = json.loads((out / "config.json").read_text())
    assert config["is_causal"] is False and config["architectures"] == [summary["class"]] and "auto_map" not in config
    hf = AutoModel.from_pretrained(str(out), attn_implementation=implementation).eval()
    assert type(hf).__name__ == summary["class"]
    ids, mask = padded_batch(model.config.vocab_size)
    want = model.model(ids, causal=False, attention_mask=mask)
    got = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    diff = (got - want)[keep].abs().max().item()
    causal = (model.model(ids, causal=True, attention_mask=mask) - got)[keep].abs().max().item()
    print(f"{family} {implementation}: export vs encoderlab bidirectional {diff:.1e} (vs causal {causal:.1e})")
    assert diff <= TOL and causal > 100 * TOL
    if model.config.sliding_window:  # the two texts as one packed window of encoderlab's pretraining
        packed = torch.cat([ids[0], ids[1, :13]])[None]
        doc_ids = torch.tensor([[0] * T + [1] * 13])
        both = model.model(packed, causal=False, doc_ids=doc_ids)[0]
        assert (both - torch.cat([got[0], got[1, :13]])).abs().max().item() <= TOL
    short = ids[:1, :6]  # within Mistral's window, whose bidirectional reach is the window per layer
    changed = short.clone()
    changed[0, -1] = (changed[0, -1] + 1) % model.config.vocab_size
    first = hf(input_ids=short).last_hidden_state[0, 0] - hf(input_ids=changed).last_hidden_state[0, 0]
    assert first.abs().max().item() > 100 * TOL  # the first token sees the last: not causal
    classifier = AutoModelForSequenceClassification.from_pretrained(str(out), num_labels=2).eval()
    body = getattr(classifier, classifier.base_model_prefix)
    assert (body(input_ids=ids, attention_mask=mask).last_hidden_state - got)[keep].abs().max().item() <= TOL


def test_encoder_card_names_the_version_that_honours_is_causal(route):
    family, ckpt, _, _, root = route
    out = root / "card"
    summary = export_checkpoint(ckpt, out, family)
    card = (out / "README.md").read_text()
    # the count is the exported class's: a bare encoder holds no LM head (an untied one read as the checkpoint's)
    held = sum(p.numel() for p in AutoModel.from_pretrained(str(out)).parameters())
    assert summary["parameters"] == held and f"\n{parameters_text(held)} parameters, " in card
    for file in out.iterdir():  # published as it is: no path of the machine that wrote it (the import's source)
        assert file.suffix == ".safetensors" or str(root) not in file.read_text(), file.name
    assert "pipeline_tag: feature-extraction" in card and "`transformers` 5.2 or later" in card
    assert "ignore `is_causal: false`" in card and 'Version("5.2")' in card and "AutoModel.from_pretrained" in card
    assert "It frames every input as `<s> text </s>`" in card
    assert re.search(r"^\d+\.\dK parameters, ", card, re.M)  # under a million: in thousands (it read 0.2M)


@torch.no_grad()
def test_sentence_transformers_body_is_the_family(route):
    from sentence_transformers import SentenceTransformer  # 4 s of import: paid by the worker that runs this only
    family, ckpt, model, tok, root = route
    out = root / "st"
    summary = export_checkpoint(ckpt, out, "sentence-transformers")
    assert summary["class"] == CLASSES[family][1].replace("ForCausalLM", "Model")
    assert json.loads((out / "config.json").read_text())["is_causal"] is False
    st = SentenceTransformer(str(out), device="cpu")
    texts = ["the cat sat on the mat", "x", "seven tall trees stand near the old river"]
    got = st.encode(texts, convert_to_tensor=True, batch_size=3)
    rows = [[tok.bos_id, *ids, tok.eos_id] for ids in tok.encode_batch(texts)]
    ids = torch.full((3, max(map(len, rows))), tok.pad_id)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    want = encode(model.model, ids, mask)
    assert (got - want).abs().max().item() <= TOL
    card = (out / "README.md").read_text()
    assert "library_name: sentence-transformers" in card and f"{family} with `is_causal: false`" in card


def test_causal_export_stays_available(route):
    family, ckpt, _, _, root = route
    summary = export_checkpoint(ckpt, root / "causal", family, attention="causal")
    assert summary["class"] == CLASSES[family][1] and "last trained with mlm40" in summary["note"]
    assert json.loads((root / "causal" / "config.json").read_text()).get("is_causal", True) is True
    with pytest.raises(EncoderlabError, match="--attention causal: --as sentence-transformers is a bidirectional"):
        export_checkpoint(ckpt, root / "x", "sentence-transformers", attention="causal")
    assert not (root / "x").exists()


@torch.no_grad()
def test_encoder_export_imports_back_as_an_encoder(route):
    """import-hf of the encoder folder: the body re-imports (objective mlm, so it exports bidirectional again); a
    tied one with its head, an untied one (the export holds no LM head) with a fresh head, which it says."""
    family, ckpt, model, _, root = route
    export_checkpoint(ckpt, root / "to-import", family)
    summary = import_hf(str(root / "to-import"), root / "back")
    fresh = [note for note in summary["notes"] if "a fresh untied head" in note]
    assert len(fresh) == (0 if model.config.tie_word_embeddings else 1)
    assert json.loads((root / "back" / "state.json").read_text())["objective"] == "mlm"
    again, _, _ = load_model(root / "back")
    ids, mask = padded_batch(model.config.vocab_size)
    diff = again.model(ids, causal=False, attention_mask=mask) - model.model(ids, causal=False, attention_mask=mask)
    assert diff.abs().max().item() == 0.0
    assert export_checkpoint(root / "back", root / "again", family)["attention"] == "bidirectional"


def test_refusals_name_the_export_asked_for_and_an_encoder_that_holds(tmp_path, route):
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM
    from encoderlab.runs.checkpoint import save_weights_only

    family, ckpt, _, tok, root = route
    if family == "qwen3":  # q/k norms: EuroBERT cannot hold them; the hint names encoders that can
        with pytest.raises(EncoderlabError, match=r"--as eurobert cannot hold this model's qk_norm=True: export it "
                                                  r"--as qwen3 \(bidirectional Qwen3Model\) or --as sentence-"):
            export_checkpoint(ckpt, tmp_path / "eurobert", "eurobert")
    cfg = ModelConfig(vocab_size=tok.vocab_size, **{k: v for k, v in SHAPE.items() if k != "max_position_embeddings"},
                      qk_norm=True, attention_bias="qkv")  # no family has both
    save_weights_only(tmp_path / "odd", TransformerLM(cfg).state_dict(), cfg, tok, {"step": 1, "objective": "mlm"})
    with pytest.raises(EncoderlabError, match=r"--as sentence-transformers cannot hold this model's "
                                              r"attention_bias='qkv': no export kind holds this combination"):
        export_checkpoint(tmp_path / "odd", tmp_path / "st", "sentence-transformers")
    assert not (tmp_path / "st").exists() and not (tmp_path / "eurobert").exists()
