"""Continued MLM pretraining of transformers' own masked-LM models (tiny random BERT, RoBERTa and ModernBERT folders
as save_pretrained writes them): 20 steps killed with SIGKILL then resumed end with the weights of the run never
interrupted (bitwise); the checkpoint's weights load in `AutoModelForMaskedLM` and compute the logits of the run's
own model; a token's output does not move when another document of its window changes; and what cannot be continued
is refused before any work."""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

import encoderlab
from conftest import WORDS, run_command, synthetic_documents
from encoderlab.core.config import validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.data.packing import pack
from encoderlab.data.tokenizer import load_tokenizer
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint
from encoderlab.runs.encoders import load_continued_encoder

KILLER = Path(__file__).with_name("killer.py")
STEPS = 20
MODELS = {"bert": {}, "roberta": {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
          "modernbert": {"global_attn_every_n_layers": 2, "local_attention": 16, "bos_token_id": 2,
                         "eos_token_id": 3, "cls_token_id": 2, "sep_token_id": 3}}


def write_masked_lm(folder: Path, model_type: str, head: bool = True, dropout: bool = True) -> Path:
    """A tiny random masked-LM `model_type` folder with a word-level fast tokenizer ([PAD] [UNK] [CLS] [SEP] [MASK]
    first); `head=False` saves the body alone (as sentence-transformers folders hold it); `dropout=False` sets every
    dropout probability of its config to 0 (runs that must equal each other step for step)."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(WORDS) | {"."}))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    settings = {"pad_token_id": 0, **MODELS.get(model_type, {})}
    cfg = AutoConfig.for_model(model_type, vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=128, **settings)
    if not dropout:
        for key, value in cfg.to_dict().items():
            if "dropout" in key and isinstance(value, float):
                setattr(cfg, key, 0.0)
    torch.manual_seed(0)
    (AutoModelForMaskedLM if head else AutoModel).from_config(cfg).save_pretrained(folder)
    return folder


def packed_with(folder: Path, out: Path, seq_len: int = 64) -> Path:
    docs = synthetic_documents(300)
    pack(docs, load_tokenizer(folder, as_transformers=True), out, seq_len=seq_len, val_fraction=0.05)
    return out


def config(out: Path, packed: Path, model: Path, name: str, **train) -> dict:
    return {"name": name, "out_dir": str(out), "data": {"path": str(packed)}, "init": {"from_weights": str(model)},
            "objective": "mlm30", "optim": {"lr": 1e-3},
            "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
            "train": {"steps": STEPS, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                      "tensorboard": False, "save_every": 5, "keep_checkpoints": 1, **train}}


@pytest.fixture(scope="module", params=sorted(MODELS))
def setup(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    model = write_masked_lm(root / "model", request.param)
    return request.param, root, model, packed_with(model, root / "packed")


def run(*jobs: dict) -> list[dict]:
    """The jobs, one after the other, in one fresh fork server (tests/faults/killer.py): their answers."""
    proc = subprocess.run([sys.executable, str(KILLER)], input="".join(json.dumps(j) + "\n" for j in jobs),
                          capture_output=True, text=True, timeout=600)
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(answers) == len(jobs), proc.stderr[-3000:]
    return answers


def test_a_killed_continued_run_resumes_to_the_uninterrupted_weights(setup):
    model_type, root, model, packed = setup
    killed = config(root, packed, model, "killed")
    whole, kill, resumed = run({"config": config(root, packed, model, "whole"), "resume": False, "kill": None},
                               {"config": killed, "resume": False, "kill": {"at": "weights", "nth": 3, "when": "mid"}},
                               {"config": killed, "resume": True, "kill": None})
    assert whole["code"] == 0 and resumed["code"] == 0, (whole, resumed)
    assert kill["signal"] == signal.SIGKILL, kill
    final = checkpoint.checkpoint_name(STEPS)
    a, b = (load_file(str(root / r / "checkpoints" / final / checkpoint.WEIGHTS)) for r in ("whole", "killed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"{model_type}: resumed weights differ"
    start = load_file(str(model / "model.safetensors"))
    moved = [k for k in start if k in a and not torch.equal(start[k], a[k])]
    assert moved, "20 steps changed no weight"


@pytest.fixture(scope="module")
def trained(setup):
    """6 steps of continued MLM: (model type, root, source folder, the Trainer after its run)."""
    model_type, root, model, packed = setup
    cfg = validate(PretrainConfig, config(root, packed, model, "trained", steps=6, save_every=0), "test")
    torch.set_num_threads(1)
    trainer = Trainer(cfg, show_progress=False, log=lambda line: None)
    trainer.run()
    return model_type, root, model, trainer


def test_the_export_loads_in_transformers_and_computes_the_runs_logits(trained, tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM

    model_type, root, model, trainer = trained
    saved = checkpoint.latest(root / "trained")
    assert json.loads((saved / "config.json").read_text())["model_type"] == model_type
    export_checkpoint(saved, tmp_path / "mlm", None)
    theirs = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "mlm"), dtype=torch.float32).eval()
    ours = trainer.module.eval()
    ids = torch.tensor([[2, 9, 12, 15, 7, 3]])  # [CLS] five words [SEP]
    with torch.no_grad():
        got = ours(ids, doc_ids=torch.zeros_like(ids))  # (6, V): every position of one document
        want = theirs(input_ids=ids).logits[0]
        assert (got - want).abs().max() <= 1e-5, model_type
        export_checkpoint(saved, tmp_path / "body", "model")
        body = AutoModel.from_pretrained(str(tmp_path / "body"), dtype=torch.float32).eval()
        assert torch.equal(body(input_ids=ids).last_hidden_state, theirs.base_model(input_ids=ids).last_hidden_state)
    cfg, weights, _ = load_continued_encoder(saved)  # what fine-tuning reads
    assert cfg.model_type == model_type and weights.keys() == {f"model.{k}" for k in body.state_dict()}
    encoder = encoderlab.load(root / "trained")  # the Python API: the body, mean-pooled
    vectors = encoder.embed(["the cat sat", "dogs ran across green fields"])
    assert vectors.shape == (2, 32) and torch.allclose(vectors.norm(dim=-1), torch.ones(2))


def test_an_unchanged_round_trip_is_exact(trained, tmp_path, one_thread):
    """In: the run's model before its first step holds the folder's weights, bit for bit. Out: the export holds the
    checkpoint's."""
    model_type, root, model, trainer = trained
    source = load_file(str(model / "model.safetensors"))
    fresh = Trainer(validate(PretrainConfig, config(tmp_path, trainer.cfg.data.path, model, "fresh", steps=6), "test"),
                    show_progress=False, log=lambda line: None).module.state_dict()
    assert all(torch.equal(fresh[k], v) for k, v in source.items()), model_type
    saved = checkpoint.latest(root / "trained")
    export_checkpoint(saved, tmp_path / "out", "masked-lm")
    ours, exported = (load_file(str(folder / "model.safetensors")) for folder in (saved, tmp_path / "out"))
    assert exported.keys() <= ours.keys() and all(torch.equal(ours[k], v) for k, v in exported.items())


def test_a_token_does_not_see_another_document_of_its_window(setup, one_thread):
    model_type, root, model, packed = setup
    cfg = validate(PretrainConfig, config(root, packed, model, "apart", steps=6), "test")
    lines = []
    trainer = Trainer(cfg, show_progress=False, log=lines.append)
    assert any("documents stay apart by" in line for line in lines), lines
    module = trainer.module.eval()
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model_cfg.vocab_size
    a, b, c = (torch.randint(5, vocab, (1, n), generator=g) for n in (20, 30, 30))
    docs = torch.tensor([[0] * 20 + [1] * 30])
    with torch.no_grad():
        first = module(torch.cat([a, b], 1), doc_ids=docs)
        second = module(torch.cat([a, c], 1), doc_ids=docs)
        alone = module(a, doc_ids=torch.zeros_like(a))
    assert torch.allclose(first[:20], second[:20], atol=1e-5, rtol=0), f"{model_type}: documents mix"
    assert torch.allclose(first[:20], alone, atol=1e-5, rtol=0)
    assert not torch.allclose(first[20:], second[20:], atol=1e-3)


def test_what_cannot_be_continued_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    bert = write_masked_lm(tmp_path / "bert", "bert")
    packed = packed_with(bert, tmp_path / "packed")
    cases = {
        "clm": ({"objective": "clm"}, "continue it with MLM phases only"),
        "model section": ({"model": {"preset": "micro"}}, "remove the model section"),
        "long windows": ({}, "positions stop at"),
    }
    long = packed_with(bert, tmp_path / "long", seq_len=256)
    llama = tmp_path / "src-llama"  # encoderlab's own backbone computes it: imported first
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    gpt2 = tmp_path / "src-gpt2"  # a body with no masked-LM class in transformers
    from transformers import AutoModel, BertConfig, GPT2Config

    AutoModel.from_config(GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2)).save_pretrained(gpt2)
    for tokenizer_file in ("tokenizer.json", "tokenizer_config.json"):
        (gpt2 / tokenizer_file).write_bytes((bert / tokenizer_file).read_bytes())
    bart = tmp_path / "src-bart"  # transformers' masked-LM mapping holds it, as BartForConditionalGeneration
    bart.mkdir()
    (bart / "config.json").write_text(json.dumps({"model_type": "bart"}))
    small = tmp_path / "src-small"  # the tokenizer of another model: ids past its embeddings
    AutoModel.from_config(BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)).save_pretrained(small)
    for tokenizer_file in ("tokenizer.json", "tokenizer_config.json"):
        (small / tokenizer_file).write_bytes((bert / tokenizer_file).read_bytes())
    nan = write_masked_lm(tmp_path / "src-nan", "bert")  # diverged at once, blaming the LR, and the layout probe too
    weights = load_file(nan / "model.safetensors")
    weights["bert.encoder.layer.0.output.dense.weight"][0, 0] = float("nan")
    save_file(weights, nan / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cases |= {"nan": ({"init": {"from_weights": str(nan)}}, "bert.encoder.layer.0.output.dense.weight is not finite"),
              "hub id": ({"init": {"from_weights": "nobody/no-such-model"}}, "not a local folder, and HF_HUB_OFFLINE"),
              "llama": ({"init": {"from_weights": str(llama)}}, "import it first .*init.from_weights=CKPT"),
              "gpt2": ({"init": {"from_weights": str(gpt2)}}, "model_type 'gpt2' is a decoder"),
              "bart": ({"init": {"from_weights": str(bart)}}, "model_type 'bart' is an encoder-decoder"),
              "small vocab": ({"init": {"from_weights": str(small)}}, "its tokenizer gives ids up to 34, but the "
                              "model has 20 embeddings: the tokenizer is not this model's")}
    for name, (change, says) in cases.items():
        cfg = {**config(tmp_path, long if name == "long windows" else packed, bert, name.replace(" ", "-")), **change}
        with pytest.raises(EncoderlabError, match=says):
            Trainer(validate(PretrainConfig, cfg, "test"), show_progress=False, log=lambda line: None)
        assert not (tmp_path / name.replace(" ", "-")).exists()


def test_the_next_command_after_packing_with_a_models_tokenizer_continues_that_model(tmp_path, monkeypatch, capsys):
    """`data prepare CORPUS --tokenizer MODEL` named a from-scratch config next, which `init.from_weights: MODEL`
    refuses (its `model:` section): the command it prints now runs as printed, continuing MODEL."""
    monkeypatch.chdir(tmp_path)
    write_masked_lm(tmp_path / "bert", "bert")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d.text}) + "\n" for d in synthetic_documents(300)))
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", "c.jsonl", "--tokenizer", "bert", "--out",
                                 "d", "--seq-len", "64", home=tmp_path / "home")
    assert code == 0, err
    given = shlex.split(out.splitlines()[-1].removeprefix("next: "))
    assert given[:2] == ["encoderlab", "pretrain"] and given[-2:] == ["--set", "init.from_weights=bert"], out
    code, out, err = run_command(monkeypatch, capsys, *given[1:], "--dry-run", home=tmp_path / "home")
    assert code == 0, err
    assert "bert" in out and not (tmp_path / "runs").exists()


def test_windows_longer_than_the_models_positions_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """`data prepare CORPUS --tokenizer MODEL` packed the default 512-token windows for a model of 128 positions,
    then named its continued pretraining next, which refused the data (`repack with --seq-len 128`): the windows
    are refused up front, in one line naming the model's positions, before any text is read."""
    monkeypatch.chdir(tmp_path)
    write_masked_lm(tmp_path / "bert", "bert")
    write_masked_lm(tmp_path / "roberta", "roberta")  # positions from its padding index + 1: 126 usable
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d.text}) + "\n" for d in synthetic_documents(30)))
    for model, usable, given in (("bert", 128, []), ("roberta", 126, ["--seq-len", "127"])):
        code, out, err = run_command(monkeypatch, capsys, "data", "prepare", "c.jsonl", "--tokenizer", model,
                                     "--out", "d", *given, home=tmp_path / "home")
        seq_len = given[-1] if given else "512"
        assert (code, out) == (2, ""), err
        assert err == (f"error: --seq-len {seq_len}: the {model} model of --tokenizer {model} reads at most {usable} "
                       f"tokens (its learned positions), so continuing it on windows of {seq_len} would be refused: "
                       f"use --seq-len {usable} or less (for a new model with this vocabulary, copy its tokenizer "
                       "files into a folder of their own and give that)\n")
        assert not (tmp_path / "d").exists()
    with pytest.raises(EncoderlabError, match=r"^seq_len=512: the bert model of tokenizer='bert' reads at most 128 "
                                              r"tokens .* use seq_len=128 or less"):
        encoderlab.prepare_data("c.jsonl", "d", tokenizer="bert", log=lambda line: None)
    assert not (tmp_path / "d").exists()
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", "c.jsonl", "--tokenizer", "bert/tokenizer.json",
                               "--out", "d", "--shard", "0/1", home=tmp_path / "home")
    assert code == 0, err  # a shard packs nothing: its join, which packs, is refused
    code, _, err = run_command(monkeypatch, capsys, "data", "prepare", "c.jsonl", "--tokenizer", "bert/tokenizer.json",
                               "--out", "d", "--join", "1", home=tmp_path / "home")
    assert code == 2 and err.startswith("error: --seq-len 512: the bert model of --tokenizer bert/tokenizer.json "), err


def test_a_continued_run_continues_again_and_exports_at_its_usable_length(trained, tmp_path, one_thread):
    model_type, root, model, trainer = trained
    again = config(tmp_path, trainer.cfg.data.path, root / "trained", "again", steps=6, save_every=0)
    lines: list[str] = []
    Trainer(validate(PretrainConfig, again, "test"), show_progress=False, log=lines.append).run()
    assert any(line.startswith("initialised weights from") and "trained" in line for line in lines)
    start = load_file(str(checkpoint.latest(root / "trained") / checkpoint.WEIGHTS))
    moved = load_file(str(checkpoint.latest(tmp_path / "again") / checkpoint.WEIGHTS))
    assert start.keys() == moved.keys() and any(not torch.equal(start[k], moved[k]) for k in start)
    export_checkpoint(tmp_path / "again", tmp_path / "st", "sentence-transformers")
    usable = 126 if model_type == "roberta" else 128  # RoBERTa's first two positions are its padding's
    assert json.loads((tmp_path / "st" / "tokenizer_config.json").read_text())["model_max_length"] == usable
    assert json.loads((tmp_path / "st" / "sentence_bert_config.json").read_text())["max_seq_length"] == usable


def test_weights_and_tokenizers_that_do_not_belong_are_refused(tmp_path, one_thread):
    from safetensors.torch import save_file
    from transformers import AutoModel

    bert = write_masked_lm(tmp_path / "bert", "bert")
    packed = packed_with(bert, tmp_path / "packed")
    body = write_masked_lm(tmp_path / "body", "bert", head=False)  # with BERT's pooler, which BertForMaskedLM lacks
    assert any(k.startswith("pooler.") for k in AutoModel.from_pretrained(str(body)).state_dict())
    stored = load_file(str(body / "model.safetensors"))  # older transformers saved BERT's position_ids buffer too
    stored["embeddings.position_ids"] = torch.arange(128)[None]  # (all-MiniLM-L6-v2's files hold it)
    save_file(stored, str(body / "model.safetensors"), metadata={"format": "pt"})
    mapped = json.loads((body / "config.json").read_text())  # its own class named beside the built-in one
    (body / "config.json").write_text(json.dumps({**mapped, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    lines: list[str] = []
    Trainer(validate(PretrainConfig, config(tmp_path, packed, body, "body", steps=6), "test"), show_progress=False,
            log=lines.append)
    assert any("pooler.dense.weight" in line and "left out" in line for line in lines), lines
    assert any("auto_map (modeling_x.XModel) not followed" in line for line in lines), lines
    weights = load_file(str(bert / "model.safetensors"))
    weights["bert.encoder.layer.2.output.dense.weight"] = torch.zeros(32, 64)  # a third layer, two in config.json
    save_file(weights, str(bert / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(EncoderlabError, match=r"no part of the BertForMaskedLM .*encoder\.layer\.2\."):
        Trainer(validate(PretrainConfig, config(tmp_path, packed, bert, "extra", steps=6), "test"),
                show_progress=False, log=lambda line: None)
    cased = write_masked_lm(tmp_path / "src-cased", "bert")
    data = json.loads((cased / "tokenizer.json").read_text())
    data["normalizer"] = None  # the same vocabulary, without lowercasing
    (cased / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(EncoderlabError, match="its normalizer differs"):
        Trainer(validate(PretrainConfig, config(tmp_path, packed, cased, "cased", steps=6), "test"),
                show_progress=False, log=lambda line: None)
    assert not (tmp_path / "extra").exists() and not (tmp_path / "cased").exists()


def test_the_export_card_carries_the_sweeps_of_its_weights_and_refuses_others(tmp_path, one_thread):
    """`--eval` (the API's `evaluation`) is read for a continued model as for encoderlab's own: the card shows the
    scores measured on these weights beside their baseline; a summary of other weights, or a path that is not there,
    is refused before anything is written."""
    from encoderlab.finetuning.records import checkpoint_tag

    bert = write_masked_lm(tmp_path / "bert", "bert")
    cfg = validate(PretrainConfig, config(tmp_path, packed_with(bert, tmp_path / "packed"), bert, "cpt", steps=2,
                                          save_every=0), "test")
    Trainer(cfg, show_progress=False, log=lambda line: None).run()
    saved = checkpoint.latest(tmp_path / "cpt")
    score = {"family": "classification", "metric": "accuracy", "test": 71.5, "ci95": 2.0, "best_lr": 1e-4,
             "seeds": 3, "test_examples": 40, "strongest_baseline": {"name": "majority", "value": 60.0}}
    summary = tmp_path / "evals" / checkpoint_tag(saved) / "p" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"tasks": {"mine": score}, "weights_sha256": checkpoint.weights_digest(saved)}))
    done = export_checkpoint(saved, tmp_path / "out", None, evaluation=tmp_path / "evals")
    card = (tmp_path / "out" / "README.md").read_text()
    assert done["evaluations"] == [str(summary)]
    assert "| mine | classification | accuracy | 71.50 | ± 2.00 |" in card and "model-index" in card
    assert "license: unknown" in card
    with pytest.raises(EncoderlabError, match="no such file or folder"):
        export_checkpoint(saved, tmp_path / "none", None, evaluation=tmp_path / "nowhere")
    summary.write_text(json.dumps({"tasks": {"mine": score}, "weights_sha256": "0" * 64}))
    with pytest.raises(EncoderlabError, match="was measured on weights 000000000000"):
        export_checkpoint(saved, tmp_path / "other", None, evaluation=summary)
    assert not (tmp_path / "none").exists() and not (tmp_path / "other").exists()
