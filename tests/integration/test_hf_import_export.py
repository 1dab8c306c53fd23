"""Hugging Face import and export on small local models (no hub): round trips are exact, a transformers Llama /
Qwen2 / Mistral folder imports with equal logits, a mask token is added when missing, and what cannot be
represented exactly is refused with a message naming the difference."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_command
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from encoderlab.core.errors import EncoderlabError
from encoderlab.data.tokenizer import train_bpe
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.hub.importer import import_hf
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.runs.checkpoint import load_model, save_weights_only, weights_digest

TOL = 1e-4
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6}  # GQA 2:1


@pytest.fixture(scope="module")
def bpe(synthetic):
    return train_bpe((d.text for d in synthetic(120)), 300)


@pytest.fixture(scope="module")
def raw_tokenizer(synthetic) -> Tokenizer:
    """A Llama-2-style tokenizer trained here: <s> and </s>, no mask and no pad token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=290, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.text for d in synthetic(120)), trainer=trainer)
    return tok


def hf_folder(path: Path, model, tokenizer: Tokenizer | None) -> Path:
    model.save_pretrained(str(path))
    if tokenizer is not None:
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
        hf_tok.save_pretrained(str(path))
    return path


def llama(raw_tokenizer: Tokenizer, *, seed: int = 0, config_cls=LlamaConfig, model_cls=LlamaForCausalLM, **over):
    n = raw_tokenizer.get_vocab_size()
    config = config_cls(**{"vocab_size": n, **SHAPE, "rope_theta": 50000.0, "bos_token_id": 0, "eos_token_id": 1,
                           "tie_word_embeddings": False, **over})
    torch.manual_seed(seed)
    return model_cls(config).eval()


def ids_for(vocab: int, T: int = 13) -> torch.Tensor:
    return torch.randint(0, vocab, (2, T), generator=torch.Generator().manual_seed(7))


def our_checkpoint(path: Path, tok, *, tied: bool, vocab_extra: int = 0) -> tuple[TransformerLM, Path]:
    """A random TransformerLM (norms perturbed, so a lost norm would show) saved as a weights-only checkpoint."""
    cfg = ModelConfig(vocab_size=tok.vocab_size + vocab_extra, **SHAPE, rope_theta=50000.0, tie_word_embeddings=tied,
                      bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                      mask_token_id=tok.mask_id)
    model = TransformerLM(cfg).eval()
    model.init_weights(seed=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(4)))
    state = {"step": 5, "reason": "final", "objective": "mlm40", "schedule": "clm:40%,mlm40:60%", "total_steps": 5}
    save_weights_only(path, model.state_dict(), cfg, tok, state)
    return model, path


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("kind", ["eurobert", "llama"])
@torch.no_grad()
def test_round_trip_ours_export_transformers_import(tmp_path, bpe, one_thread, kind, tied):
    ours, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=tied, vocab_extra=5)  # 5 padding rows no id reaches
    causal = kind == "llama"
    ids = ids_for(ours.config.vocab_size)
    want = ours(ids, causal=causal)

    export = tmp_path / "export"
    summary = export_checkpoint(ckpt, export, kind, attention="causal" if causal else None)
    assert summary["class"] == ("EuroBertForMaskedLM" if kind == "eurobert" else "LlamaForCausalLM")
    assert not list(export.glob("*.bin")) and (export / "model.safetensors").exists()
    assert "auto_map" not in json.loads((export / "config.json").read_text())  # native: no remote code
    auto = AutoModelForMaskedLM if kind == "eurobert" else AutoModelForCausalLM
    hf = auto.from_pretrained(str(export), attn_implementation="eager").eval()
    diff_hf = (hf(input_ids=ids).logits - want).abs().max().item()

    back = import_hf(str(export), tmp_path / "back")
    assert back["added_tokens"] == []  # the exported tokenizer kept its mask token
    model, cfg, tok = load_model(tmp_path / "back")
    diff_back = (model(ids, causal=causal) - want).abs().max().item()
    print(f"{kind} {'tied' if tied else 'untied'}: ours vs transformers {diff_hf:.2e}, ours vs re-imported "
          f"{diff_back:.2e}")
    assert diff_hf <= TOL and diff_back <= TOL
    assert cfg.model_dump() == {**ours.config.model_dump(), "initializer_range": cfg.initializer_range}
    assert (tok.mask_id, tok.pad_id) == (bpe.mask_id, bpe.pad_id)


@torch.no_grad()
def test_eurobert_export_loads_with_every_auto_class(tmp_path, bpe, one_thread):
    _, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=False)
    export = tmp_path / "export"
    export_checkpoint(ckpt, export, "eurobert")
    ids = ids_for(bpe.vocab_size, T=9)
    hidden = AutoModel.from_pretrained(str(export))(input_ids=ids).last_hidden_state
    assert hidden.shape == (2, 9, SHAPE["hidden_size"])
    sequence = AutoModelForSequenceClassification.from_pretrained(str(export), num_labels=3)
    assert sequence(input_ids=ids).logits.shape == (2, 3)
    token = AutoModelForTokenClassification.from_pretrained(str(export), num_labels=5)
    assert token(input_ids=ids).logits.shape == (2, 9, 5)
    card = (export / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in card and "clm:40%,mlm40:60%" in card and "Not evaluated." in card
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(export))
    assert hf_tok.mask_token == "<mask>" and hf_tok.mask_token_id == bpe.mask_id
    assert hf_tok("the cat").input_ids == [bpe.bos_id, *bpe.encode_batch(["the cat"])[0], bpe.eos_id]


@torch.no_grad()
def test_eurobert_export_classifies_from_the_mean_of_its_tokens(tmp_path, bpe, one_thread):
    """`classifier_pooling: mean` in the export: the stock classifier pools the hidden states over the attention mask
    as encoderlab's heads do (EuroBERT's default, `late`, would average per-token logits)."""
    ours, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=False)
    export_checkpoint(ckpt, tmp_path / "export", "eurobert")
    assert json.loads((tmp_path / "export" / "config.json").read_text())["classifier_pooling"] == "mean"
    clf = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "export"), num_labels=3).eval()
    ids, mask = ids_for(bpe.vocab_size, T=9), torch.ones(2, 9, dtype=torch.long)
    mask[1, 5:] = 0  # a padded row
    hidden = ours.model(ids, causal=False, attention_mask=mask)  # (B, T, C)
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    want = clf.classifier(clf.activation(clf.dense(pooled)))
    assert (clf(input_ids=ids, attention_mask=mask).logits - want).abs().max().item() <= 1e-5


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@torch.no_grad()
def test_transformers_llama_folder_imports_with_a_mask_token(tmp_path, raw_tokenizer, one_thread, tied):
    hf = llama(raw_tokenizer, tie_word_embeddings=tied)
    src = hf_folder(tmp_path / "llama", hf, raw_tokenizer)
    summary = import_hf(str(src), tmp_path / "ckpt")
    model, cfg, tok = load_model(tmp_path / "ckpt")
    n = raw_tokenizer.get_vocab_size()

    assert summary["added_tokens"] == ["<mask>"] and tok.mask_id == n and cfg.vocab_size == n + 1
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id, cfg.mask_token_id) == (0, 1, 1, n)  # pad: EOS
    assert (cfg.rope_theta, cfg.rms_norm_eps, cfg.tie_word_embeddings) == (50000.0, 1e-6, tied)
    record = json.loads((tmp_path / "ckpt" / "import.json").read_text())
    assert record["model_type"] == "llama" and record["tokenizer"]["added_tokens"] == ["<mask>"]
    assert record["embedding_rows"] == {"source": n, "imported": n + 1}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        matrix = model.state_dict()[name]
        torch.testing.assert_close(matrix[n], hf.state_dict()[name].mean(0))  # the new row is the mean row
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied

    hf.config._attn_implementation = "eager"
    ids = ids_for(n)
    diff = (model(ids, causal=True)[..., :n] - hf(input_ids=ids).logits).abs().max().item()
    print(f"transformers Llama ({'tied' if tied else 'untied'}) vs imported, causal: max|diff| = {diff:.2e}")
    assert diff <= TOL


@torch.no_grad()
def test_qwen2_with_zero_biases_and_mistral_window(tmp_path, raw_tokenizer, one_thread):
    n = raw_tokenizer.get_vocab_size()
    ids = ids_for(n, T=12)
    # A row for the <|endoftext|> that transformers 5's Qwen2Tokenizer adds to any tokenizer of a qwen2 folder
    qwen = llama(raw_tokenizer, config_cls=Qwen2Config, model_cls=Qwen2ForCausalLM, vocab_size=n + 1)
    for name, p in qwen.named_parameters():
        if name.endswith(".bias"):
            p.zero_()  # all-zero q/k/v biases: kept (attention_bias="qkv"), so the export is the source again
    mistral = llama(raw_tokenizer, config_cls=MistralConfig, model_cls=MistralForCausalLM, sliding_window=16)
    for name, hf in (("qwen2", qwen), ("mistral", mistral)):
        summary = import_hf(str(hf_folder(tmp_path / name, hf, raw_tokenizer)), tmp_path / f"{name}-ckpt")
        model, cfg, _ = load_model(tmp_path / f"{name}-ckpt")
        hf.config._attn_implementation = "eager"
        diff = (model(ids, causal=True)[..., :n] - hf(input_ids=ids).logits[..., :n]).abs().max().item()
        print(f"{name} vs imported: max|diff| = {diff:.2e}; notes: {summary['notes']}")
        assert diff <= TOL
    # The window is enforced (tests/unit/test_hf_families.py), so the context stays the source's.
    assert (cfg.sliding_window, cfg.max_position_embeddings) == (16, mistral.config.max_position_embeddings)


def _write_config(path: Path, **config) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_refusals_name_what_differs(tmp_path, raw_tokenizer, one_thread, monkeypatch):
    def refused(src, message: str) -> None:
        with pytest.raises(EncoderlabError, match=message):
            import_hf(str(src), tmp_path / "out")
        assert not (tmp_path / "out").exists()

    refused(tmp_path / "missing", "no such file or folder")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "not a Hugging Face model folder: it has no config.json")
    (tmp_path / "notes.txt").write_text("hello")
    refused(tmp_path / "notes.txt", "not a .gguf")
    refused(_write_config(tmp_path / "gpt2", model_type="gpt2"), "unsupported architecture model_type='gpt2'")
    refused(_write_config(tmp_path / "qwen3_moe", model_type="qwen3_moe"), "mixture-of-experts")
    scaled = llama(raw_tokenizer, rope_scaling={"rope_type": "linear", "factor": 2.0})
    refused(hf_folder(tmp_path / "scaled", scaled, raw_tokenizer), "rope_type='linear'.*plain RoPE and the llama3")

    biased = llama(raw_tokenizer, mlp_bias=True)
    with torch.no_grad():
        biased.model.layers[0].mlp.up_proj.bias.fill_(0.1)
    refused(hf_folder(tmp_path / "biased", biased, raw_tokenizer), "mlp_bias=True.*attention biases only")

    small = llama(raw_tokenizer, vocab_size=200)  # the tokenizer has 290 ids
    refused(hf_folder(tmp_path / "small", small, raw_tokenizer), "290 token ids but the embedding matrix only 200 rows")
    refused(hf_folder(tmp_path / "no-tokenizer", llama(raw_tokenizer), None), "has no tokenizer")
    infinite = llama(raw_tokenizer)
    with torch.no_grad():
        infinite.model.layers[1].mlp.down_proj.weight[0, 0] = float("inf")
    refused(hf_folder(tmp_path / "infinite", infinite, raw_tokenizer),
            f"{tmp_path / 'infinite'}: weight model.layers.1.mlp.down_proj.weight is not finite")

    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if not installed: `import gguf` raises ImportError
    refused(tmp_path / "model.gguf", r"needs the gguf package: pip install gguf")


def test_outputs_are_never_overwritten_silently(tmp_path, bpe):
    _, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=True)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("precious")
    with pytest.raises(EncoderlabError, match="not empty: pass --force"):
        export_checkpoint(ckpt, tmp_path / "taken", "eurobert")
    with pytest.raises(EncoderlabError, match="holds the input"):
        export_checkpoint(ckpt, tmp_path, "eurobert", force=True)
    with pytest.raises(EncoderlabError, match="not an export format"):
        export_checkpoint(ckpt, tmp_path / "x", "bert")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "precious"


def test_cli_export_json_and_one_line_error(tmp_path, bpe, monkeypatch, capsys):
    _, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=False)
    code, out, err = run_command(monkeypatch, capsys, "export", ckpt, "--out", tmp_path / "llama", "--as", "llama",
                                 "--attention", "causal", "--json", home=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["class"] == "LlamaForCausalLM" and "last trained with mlm40" in summary["note"]
    assert "note:" in err  # an MLM-trained model exported as causal is pointed out
    code, _, err = run_command(monkeypatch, capsys, "import-hf", tmp_path / "ckpt", "--out", tmp_path / "x",
                               home=tmp_path)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "no config.json" in errors[0], err


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_imported_checkpoint_continues_pretraining(tmp_path, raw_tokenizer, synthetic, one_thread, tied):
    """init.from_weights on an import, with data packed by the imported tokenizer, trains and checkpoints."""
    from encoderlab.core.config import validate
    from encoderlab.data.packing import pack
    from encoderlab.data.tokenizer import load_tokenizer
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    import_hf(str(hf_folder(tmp_path / "llama", llama(raw_tokenizer, tie_word_embeddings=tied), raw_tokenizer)),
              tmp_path / "ckpt")
    pack(synthetic(60), load_tokenizer(tmp_path / "ckpt" / "tokenizer"), tmp_path / "data", seq_len=32)
    shape = json.loads((tmp_path / "ckpt" / "model_config.json").read_text())
    cfg = validate(PretrainConfig, {
        "name": "cpt", "out_dir": str(tmp_path), "data": {"path": str(tmp_path / "data")},
        "model": {"preset": "tiny", **shape}, "objective": "mlm40", "init": {"from_weights": str(tmp_path / "ckpt")},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1},
    }, "test")
    summary = Trainer(cfg, show_progress=False, log=lambda message: None).run()
    assert summary["final"]["mlm40/loss"] > 0 and (tmp_path / "cpt" / "checkpoints" / "step-0000002").exists()


def test_model_card_reports_evaluation_given_or_found(tmp_path, bpe, monkeypatch):
    from encoderlab.finetuning.records import checkpoint_tag

    _, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=False)
    summary = {"checkpoint": str(ckpt), "weights_sha256": weights_digest(ckpt), "protocol": {"name": "demo"}, "tasks": {
        "rt_polarity": {"family": "classification", "metric": "accuracy", "test": 81.234, "ci95": 1.5,
                        "best_lr": 3e-4, "seeds": 3},
        "conll_ner": {"family": "tokens", "metric": "entity_f1", "runs": 2, "failed": 2}}}
    found = tmp_path / "evals" / checkpoint_tag(ckpt) / "demo-1234abcd" / "summary.json"
    found.parent.mkdir(parents=True)
    found.write_text(json.dumps(summary))
    monkeypatch.chdir(tmp_path)  # without --eval, ./evals is searched for this checkpoint
    export_checkpoint(ckpt, tmp_path / "found", "eurobert")
    card = (tmp_path / "found" / "README.md").read_text()
    # a summary from before baselines were named: "-", said so above the table
    assert "| rt_polarity | classification | accuracy | 81.23 | ± 1.50 | 0.0003 | 3 | - | - |" in card
    assert "| conll_ner | tokens | entity_f1 | failed |" in card and "Not evaluated." not in card
    export_checkpoint(ckpt, tmp_path / "given", "eurobert", evaluation=found)
    assert "81.23" in (tmp_path / "given" / "README.md").read_text()
    assert "Protocol `demo`" in card  # a summary without its key: its protocol's name
    summary["protocol_key"] = "demo-5678ef01"  # an evaluation is named by its key: name and settings
    (tmp_path / "summary.json").write_text(json.dumps(summary))  # outside the layout: its own key, not a folder
    export_checkpoint(ckpt, tmp_path / "keyed", "eurobert", evaluation=tmp_path / "summary.json")
    assert "(protocol demo-5678ef01, mean of 3 seeds" in (tmp_path / "keyed" / "README.md").read_text()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(EncoderlabError, match="not an evaluation summary"):
        export_checkpoint(ckpt, tmp_path / "bad", "eurobert", evaluation=tmp_path / "bad.json")


def test_a_card_publishes_only_summaries_of_the_exported_weights(tmp_path, bpe, monkeypatch):
    """A summary measured on other weights (a retrained model under the same path, another model's summary) is
    refused when given, in one line naming both hashes and where each was read, and left out, logged, when found."""
    from encoderlab.finetuning.records import checkpoint_tag

    _, ckpt = our_checkpoint(tmp_path / "ckpt", bpe, tied=False)
    ours = weights_digest(ckpt)
    tasks = {"rt_polarity": {"family": "classification", "metric": "accuracy", "test": 81.234, "ci95": 1.5,
                             "best_lr": 3e-4, "seeds": 3}}
    other = {"checkpoint": str(ckpt), "weights_sha256": "f" * 64, "protocol": {"name": "demo"}, "tasks": tasks}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(EncoderlabError) as refused:
        export_checkpoint(ckpt, tmp_path / "given", "eurobert", evaluation=tmp_path / "other.json")
    line = str(refused.value)
    assert "\n" not in line and "ffffffffffff (its weights_sha256)" in line
    assert f"holds weights {ours[:12]} ({ckpt / 'checksums.json'})" in line
    assert not (tmp_path / "given").exists()
    (tmp_path / "unnamed.json").write_text(json.dumps({k: v for k, v in other.items() if k != "weights_sha256"}))
    with pytest.raises(EncoderlabError, match="names no weights_sha256"):
        export_checkpoint(ckpt, tmp_path / "given", "eurobert", evaluation=tmp_path / "unnamed.json")

    evals = tmp_path / "evals" / checkpoint_tag(ckpt)
    for key, digest in (("old-1234abcd", "f" * 64), ("new-5678ef01", ours)):
        (evals / key).mkdir(parents=True)
        (evals / key / "summary.json").write_text(json.dumps({**other, "weights_sha256": digest,
                                                              "protocol_key": key}))
    monkeypatch.chdir(tmp_path)
    logged: list[str] = []
    summary = export_checkpoint(ckpt, tmp_path / "found", "eurobert", log=logged.append)
    card = (tmp_path / "found" / "README.md").read_text()
    assert summary["evaluations"] == [str(Path("evals") / checkpoint_tag(ckpt) / "new-5678ef01" / "summary.json")]
    assert "protocol new-5678ef01" in card and "old-1234abcd" not in card
    assert any(m.startswith("left out of the card: ") and "old-1234abcd" in m for m in logged)


def test_a_damaged_weight_file_is_one_line_naming_it(tmp_path):
    from encoderlab.hub.source import folder_weights

    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")  # a header cut short
    with pytest.raises(EncoderlabError, match=rf"{tmp_path / 'model.safetensors'} cannot be read as weights "
                                              r"\(SafetensorError: .*\): the file is damaged or cut short"):
        folder_weights(tmp_path)


def test_an_auto_map_beside_a_built_in_type_is_named_in_the_notes(tmp_path, raw_tokenizer, one_thread):
    """transformers' own LlamaModel reads the folder; the note says the folder's class was not the one used."""
    src = hf_folder(tmp_path / "llama", llama(raw_tokenizer), raw_tokenizer)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    summary = import_hf(str(src), tmp_path / "ckpt")
    assert any("config.json's auto_map (modeling_x.XModel) not followed" in note for note in summary["notes"])
