"""An imported model's tokenizer survives import -> export unchanged: special tokens, BOS/EOS behaviour (the
post-processor), chat template, unk; exports load in transformers 4.x as in 5.x (config keys 4.x reads, a
tokenizer class it knows); import and export folders get the umask's permissions; the model card carries the Hub's
metadata and no local path."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from encoderlab.hub.card import public
from encoderlab.hub.exporter import compatible_config, export_checkpoint
from encoderlab.hub.importer import import_hf
from encoderlab.runs.checkpoint import weights_digest

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXTS = ["The film was a success.", "  two  spaces and\ttabs\n", "<|im_start|>user\nhi<|im_end|>\n",
         "naïve café, Zürich, 東京, emoji 🙂", "a <|endoftext|> inside", "", "the cat sat " * 400]
PAIRS = [("first sentence", "second one"), ("<|im_start|>q", "ünïcode ✓")]
CONTEXT = 512


@pytest.fixture(scope="module")
def source(tmp_path_factory, synthetic) -> Path:
    """A SmolLM2-like folder in the huggingface_hub cache layout: ChatML specials, a chat template, unk, and a
    post-processor that adds no BOS but an EOS (so that both are checked)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator((d.text for d in synthetic(120)), trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="$A <|im_end|>", pair="$A <|im_end|> $B:1 <|im_end|>:1",
                                                       special_tokens=[("<|im_end|>", 2)])
    folder = tmp_path_factory.mktemp("hub") / "models--acme--tiny-chat" / "snapshots" / "0123abcd"
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=CONTEXT,
                         rope_theta=50000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                            unk_token="<|endoftext|>", chat_template=CHAT).save_pretrained(str(folder))
    return folder


def encodings(tok) -> dict:
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    return {"texts": [tok(t).input_ids for t in TEXTS], "pairs": [tok(a, b).input_ids for a, b in PAIRS],
            "decoded": [tok.decode(tok(t).input_ids) for t in TEXTS],
            "chat": tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True),
            "specials": (tok.bos_token, tok.eos_token, tok.unk_token)}


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_import_then_export_keeps_the_source_tokenizer(tmp_path, source, one_thread, umask):
    before = os.umask(umask)
    try:
        import_hf(str(source), tmp_path / "ckpt")
        for kind in ("llama", "eurobert"):
            export_checkpoint(tmp_path / "ckpt", tmp_path / kind, kind)
    finally:
        os.umask(before)
    wrong = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.rglob("*")
             if stat.S_IMODE(p.stat().st_mode) != (0o777 if p.is_dir() else 0o666) & ~umask}
    assert not wrong  # files 0644 / folders 0755 under umask 022, 0600 / 0700 under 077

    expected = encodings(AutoTokenizer.from_pretrained(str(source)))
    assert expected["texts"][0][-1] == 2 and 1 not in expected["texts"][0]  # the source adds EOS, not BOS
    for kind in ("llama", "eurobert"):
        exported = AutoTokenizer.from_pretrained(str(tmp_path / kind))
        assert encodings(exported) == expected, kind
        # added, as the import adds them: a mask token for MLM, and EOS as padding where the source had none
        added = (exported.mask_token, exported.pad_token, exported.model_max_length)
        assert added == ("<|mask|>", "<|im_end|>", CONTEXT)
        config = json.loads((tmp_path / kind / "tokenizer_config.json").read_text())
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # a class 4.x and 5.x both build as saved


def test_exported_config_reads_the_same_in_transformers_4(tmp_path, source, one_thread):
    """4.x reads `rope_theta` / `rope_scaling` and ignores 5.x's `rope_parameters` (it would default to 10,000)."""
    import_hf(str(source), tmp_path / "ckpt")
    export_checkpoint(tmp_path / "ckpt", tmp_path / "llama", "llama")
    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 50000.0
    assert config["rope_scaling"] is None  # plain RoPE: what 4.x means by no scaling

    scaled = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    LlamaConfig(rope_parameters=scaled, max_position_embeddings=512).save_pretrained(str(tmp_path / "scaled"))
    compatible_config(tmp_path / "scaled")
    config = json.loads((tmp_path / "scaled" / "config.json").read_text())
    assert config["rope_theta"] == 500000.0
    assert config["rope_scaling"] == {k: v for k, v in scaled.items() if k != "rope_theta"}
    assert AutoConfig.from_pretrained(str(tmp_path / "scaled")).rope_parameters == scaled  # 5.x reads it unchanged


def test_model_card_has_hub_metadata_and_no_local_path(tmp_path, source, one_thread):
    import_hf(str(source), tmp_path / "ckpt")
    summary = {"protocol": {"name": "demo"}, "weights_sha256": weights_digest(tmp_path / "ckpt"), "tasks": {
        "rt_polarity": {"family": "classification", "metric": "accuracy", "test": 81.234, "ci95": 1.5,
                        "best_lr": 3e-4, "seeds": 3}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    export_checkpoint(tmp_path / "ckpt", tmp_path / "out", "eurobert", evaluation=tmp_path / "summary.json")
    card = (tmp_path / "out" / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["base_model"] == "acme/tiny-chat" and meta["license"] == "unknown"  # the cache path names the repo
    assert meta["pipeline_tag"] == "fill-mask"
    result = meta["model-index"][0]["results"][0]
    assert result["task"]["type"] == "text-classification" and result["metrics"][0]["value"] == 81.23
    assert str(tmp_path) not in card and "PATH" not in card and "/tmp" not in card
    assert 'from_pretrained("out"' in card and "transformers` 5.3 or later" in card


def test_public_cuts_absolute_paths_only():
    assert public("imported from `/home/me/models/x.gguf` (llama)") == "imported from `x.gguf` (llama)"
    assert public("see https://huggingface.co/acme/x, ratio 1/2, clm:40%") == (
        "see https://huggingface.co/acme/x, ratio 1/2, clm:40%")
    assert public("eos `</s>` (2)") == "eos `</s>` (2)"  # a token, not a path
