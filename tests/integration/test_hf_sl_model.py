"""The paper's released checkpoints (`model_type: sl_model`) import natively, with no code of theirs run, and a body
saved without its LM head imports with a head started as it says. A tiny sl_model folder in the released layout
(an auto_map to planted Python files that would leave a mark, safetensors under `model.`, with and without
`lm_head.weight`, `is_causal` true and false) imports to the hidden states of transformers' `LlamaModel` on the same
weights: causal, or with a 4-D mask that lets every token see every token."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_command
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, PreTrainedTokenizerFast

from encoderlab.hub.exporter import export_checkpoint
from encoderlab.hub.families import architecture_fields
from encoderlab.hub.importer import import_hf
from encoderlab.hub.source import read_config
from encoderlab.runs.checkpoint import load_model

TOL = 1e-5
MASK = "<|reserved_special_token_0|>"  # what the released checkpoints' mask_token_id names (id 128002 there)
SHAPE = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "max_position_embeddings": 64,
         "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}
PLANTED = "from pathlib import Path\nPath({mark!r}).write_text('the folder ran its code')\n"


@pytest.fixture(scope="module")
def tokenizer(synthetic) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<s>", "</s>", MASK], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.text for d in synthetic(80)), trainer=trainer)
    return tok


def random_llama(tokenizer: Tokenizer, seed: int = 0) -> LlamaForCausalLM:
    """A random Llama, norms moved off 1 so a lost one would show."""
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), **SHAPE)
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape))
    return hf


def sl_folder(path: Path, hf: LlamaForCausalLM, tokenizer: Tokenizer, mark: Path, *, is_causal: bool,
              head: bool, **config_over) -> Path:
    """The released layout: SLModel's config.json with its auto_map, the remote code it names (planted: importing
    either file writes `mark`), weights under `model.` (with or without lm_head.weight), the tokenizer."""
    path.mkdir(parents=True)
    config = {**{k: v for k, v in hf.config.to_dict().items() if k not in ("model_type", "architectures")},
              "model_type": "sl_model", "architectures": ["SLModel"], "is_causal": is_causal, "mask_token_id": 2,
              "classifier_pooling": "mean", "retrieval_pooling": "mean",
              "auto_map": {"AutoConfig": "configuration_sl_model.SLModelConfig",
                           "AutoModel": "modeling_sl_model.SLModel"}, **config_over}
    (path / "config.json").write_text(json.dumps(config))
    for name in ("configuration_sl_model.py", "modeling_sl_model.py"):
        (path / name).write_text(PLANTED.format(mark=str(mark)))
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if head or k != "lm_head.weight"}
    assert all(k.startswith("model.") for k in state if k != "lm_head.weight")
    save_file(state, str(path / "model.safetensors"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>").save_pretrained(str(path))
    return path


def llama_hidden(hf: LlamaForCausalLM, ids: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """transformers' LlamaModel on the same weights: causal, or given a 4-D additive mask of zeros, under which
    every token sees every token (transformers passes a 4-D mask to the attention as it is)."""
    config = LlamaConfig(**{**hf.config.to_dict(), "model_type": "llama"})
    config._attn_implementation = "eager"
    body = LlamaModel(config).eval()
    body.load_state_dict({k.removeprefix("model."): v for k, v in hf.state_dict().items() if k.startswith("model.")})
    B, T = ids.shape
    mask = None if causal else torch.zeros(B, 1, T, T)
    hidden = body(input_ids=ids, attention_mask=mask).last_hidden_state
    if not causal:  # the same as transformers' own bidirectional Llama (`is_causal: false`, 5.2 and later)
        config.is_causal = False
        assert torch.equal(body(input_ids=ids).last_hidden_state, hidden)
    return hidden


@pytest.mark.parametrize("head", [True, False], ids=["lm_head", "body-only"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
@torch.no_grad()
def test_sl_model_imports_without_running_its_code(tmp_path, tokenizer, one_thread, is_causal, head):
    hf, mark = random_llama(tokenizer), tmp_path / "MARK"
    src = sl_folder(tmp_path / "sl", hf, tokenizer, mark, is_causal=is_causal, head=head)
    summary = import_hf(str(src), tmp_path / "ckpt")
    assert not mark.exists()
    model, cfg, tok = load_model(tmp_path / "ckpt")
    ids = torch.randint(0, tokenizer.get_vocab_size(), (2, 20), generator=torch.Generator().manual_seed(7))
    want = llama_hidden(hf, ids, causal=is_causal)
    diff = (model.model(ids, causal=is_causal) - want).abs().max().item()
    other = (model.model(ids, causal=not is_causal) - want).abs().max().item()
    print(f"sl_model is_causal={is_causal} head={head}: max|hidden diff| {diff:.1e} (other attention: {other:.1e})")
    assert diff <= TOL and other > 100 * TOL

    assert summary["model_type"] == "sl_model" and summary["added_tokens"] == []
    assert tok.mask_id == cfg.mask_token_id == 2 and tok.token(2) == MASK
    assert cfg.vocab_size == tokenizer.get_vocab_size()  # the mask is a token of the source: no row added
    state = json.loads((tmp_path / "ckpt" / "state.json").read_text())
    assert state["objective"] == ("clm" if is_causal else "mlm")
    record = json.loads((tmp_path / "ckpt" / "import.json").read_text())
    assert record["model_type"] == record["source_config"]["model_type"] == "sl_model"
    assert any("auto_map" in note and "modeling_sl_model.SLModel" in note for note in record["notes"])
    if head:
        assert record["lm_head"] == {"in_source": "lm_head.weight", "start": "source"}
        assert torch.equal(model.lm_head.weight, hf.lm_head.weight)
    else:
        assert record["lm_head"] == {"in_source": None, "start": "fresh", "std": 0.02, "seed": 0}
        assert not cfg.tie_word_embeddings and model.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_sl_model_through_the_command_says_how_its_head_starts(tmp_path, tokenizer, monkeypatch, capsys):
    mark = tmp_path / "MARK"
    src = sl_folder(tmp_path / "sl", random_llama(tokenizer), tokenizer, mark, is_causal=False, head=False)
    monkeypatch.setattr("builtins.input", lambda *a: "y")  # were anything asked, the answer would be yes
    code, out, err = run_command(monkeypatch, capsys, "import-hf", src, "--out", tmp_path / "tied", "--head", "tied",
                                 home=tmp_path)
    assert code == 0, err
    assert "imported sl_model" in out and "the head is tied to the embedding (--head tied)" in out
    model, cfg, _ = load_model(tmp_path / "tied")
    assert cfg.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    code, out, _ = run_command(monkeypatch, capsys, "import-hf", src, "--out", tmp_path / "s1", "--head-seed", "1",
                               home=tmp_path)
    assert code == 0 and "a fresh untied head, normal(0, 0.02) as encoderlab initialises one, seed 1" in out
    # a study plans an import from config.json alone (study/imported.py `architecture`): the shapes it imports to
    config = read_config(src)
    planned = {**architecture_fields(config, src, []), "vocab_size": config.vocab_size}
    imported = json.loads((tmp_path / "s1" / "model_config.json").read_text())
    assert {k: imported[k] for k in planned} == planned
    # it exports as the Llama body it is: bidirectional (is_causal: false, its last objective mlm)
    summary = export_checkpoint(tmp_path / "s1", tmp_path / "st", "sentence-transformers")
    assert summary["class"] == "LlamaModel" and summary["attention"] == "bidirectional"
    assert not mark.exists()


def refused(monkeypatch, capsys, *args, says: str) -> None:
    code, _, err = run_command(monkeypatch, capsys, "import-hf", *args)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("· ")]  # not progress
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0], lines[0]


def test_wrong_sl_model_inputs_are_one_line(tmp_path, tokenizer, monkeypatch, capsys):
    hf, mark = random_llama(tokenizer), tmp_path / "MARK"

    def folder(name: str, is_causal=False, **over) -> Path:
        return sl_folder(tmp_path / name, hf, tokenizer, mark, is_causal=is_causal, head=True, **over)

    out = ("--out", tmp_path / "out")
    refused(monkeypatch, capsys, folder("gelu", hidden_act="gelu"), *out,
            says="this sl_model model differs from encoderlab's architecture: hidden_act='gelu'")
    refused(monkeypatch, capsys, folder("far-mask", mask_token_id=5000), *out,
            says="mask_token_id=5000 is no token of its tokenizer")
    refused(monkeypatch, capsys, folder("causal-text", is_causal="yes"), *out,
            says="is_causal='yes': SLModel's is_causal is true or false")
    refused(monkeypatch, capsys, folder("bad-shape", hidden_size="wide"), *out,
            says="not a Llama config, as an SLModelConfig is")
    refused(monkeypatch, capsys, folder("has-head"), *out, "--head", "fresh",
            says="--head fresh: ")
    refused(monkeypatch, capsys, folder("bad-head"), *out, "--head", "random",
            says="--head 'random': choose fresh")
    evil = folder("evil-tokenizer")
    settings = json.loads((evil / "tokenizer_config.json").read_text())
    settings.update(tokenizer_class="Evil", auto_map={"AutoTokenizer": ["modeling_sl_model.Evil", None]})
    (evil / "tokenizer_config.json").write_text(json.dumps(settings))
    refused(monkeypatch, capsys, evil, *out, says=f"{evil / 'tokenizer_config.json'} asks for tokenizer_class 'Evil'")
    assert not mark.exists() and not (tmp_path / "out").exists()


def test_body_only_llama_imports_and_continues_pretraining(tmp_path, tokenizer, synthetic, one_thread):
    """A LlamaModel save (no lm_head.weight, untied) imports with a fresh head, and CPT from it trains it."""
    from encoderlab.core.config import validate
    from encoderlab.data.packing import pack
    from encoderlab.data.tokenizer import load_tokenizer
    from encoderlab.pretraining.config import PretrainConfig
    from encoderlab.pretraining.loop import Trainer

    hf = random_llama(tokenizer)
    body = LlamaModel(hf.config)
    body.load_state_dict({k.removeprefix("model."): v for k, v in hf.state_dict().items() if k.startswith("model.")})
    body.save_pretrained(str(tmp_path / "llama"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>").save_pretrained(
        str(tmp_path / "llama"))
    summary = import_hf(str(tmp_path / "llama"), tmp_path / "ckpt")
    assert any(n.startswith("the source has no LM head") and "a fresh untied head" in n for n in summary["notes"])
    assert summary["added_tokens"] == ["<mask>"]  # a Llama's tokenizer has no mask: the head grows by its row too
    pack(synthetic(60), load_tokenizer(tmp_path / "ckpt" / "tokenizer"), tmp_path / "data", seq_len=32)
    shape = json.loads((tmp_path / "ckpt" / "model_config.json").read_text())
    cfg = validate(PretrainConfig, {
        "name": "cpt", "out_dir": str(tmp_path), "data": {"path": str(tmp_path / "data")},
        "model": {"preset": "tiny", **shape}, "objective": "mlm40", "init": {"from_weights": str(tmp_path / "ckpt")},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1},
    }, "test")
    result = Trainer(cfg, show_progress=False, log=lambda message: None).run()
    assert result["final"]["mlm40/loss"] > 0 and (tmp_path / "cpt" / "checkpoints" / "step-0000002").exists()



def test_a_released_checkpoint_by_name_is_fetched_without_its_code(tmp_path, tokenizer, monkeypatch):
    """`import-hf 610m-clm-42k` asks the Hub for MLMvsCLM/610m-clm-42k's config, weights and tokenizer only (its
    Python files are not even downloaded); the stand-in download here is a released-layout folder."""
    import huggingface_hub

    from encoderlab.data import hub_access
    from encoderlab.runs.hub_models import ALLOWED, hub_repo

    assert hub_repo("610m-clm-42k") == "MLMvsCLM/610m-clm-42k" and hub_repo("owner/name") == "owner/name"
    assert hub_repo("rt-polarity") is None and hub_repo("my/model.gguf") is None
    assert not any(p.endswith(".py") or p == "*" for p in ALLOWED)
    folder = sl_folder(tmp_path / "snapshot", random_llama(tokenizer), tokenizer, tmp_path / "MARK", is_causal=False,
                       head=False)
    asked = []

    def snapshot_download(repo_id, allow_patterns):
        asked.append((repo_id, allow_patterns))
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(hub_access, "probe_hub", lambda spec: None)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import_hf("610m-clm-42k", tmp_path / "ckpt", log=lambda m: None)
    assert asked == [("MLMvsCLM/610m-clm-42k", list(ALLOWED))]
    assert (tmp_path / "ckpt" / "state.json").exists() and not (tmp_path / "MARK").exists()


def test_a_released_checkpoint_by_name_offline_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_command(monkeypatch, capsys, "import-hf", "610m-clm-42k", "--out", tmp_path / "ckpt")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "MLMvsCLM/610m-clm-42k: not a local folder, and HF_HUB_OFFLINE is set" in err
    assert not (tmp_path / "ckpt").exists()
