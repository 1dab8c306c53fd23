"""The Python API checks what it is given as the command line does (one EncoderlabError line naming the argument),
and a loaded checkpoint computes what fine-tuning, retrieval and the transformers export compute."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, train_tiny

import encoderlab
from encoderlab.core.arguments import Positive, checked, whole_numbers
from encoderlab.core.errors import EncoderlabError


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, packed_dir) -> Path:
    return train_tiny(tmp_path_factory.mktemp("runs"), packed_dir)


@pytest.fixture(scope="module")
def enc(checkpoint):
    return encoderlab.load(checkpoint)


@pytest.mark.parametrize(("call", "says"), [
    (lambda e, c: encoderlab.load(3), "load: argument checkpoint=3: takes a path"),
    (lambda e, c: encoderlab.load(c, 1, 2), "load: takes 1 positional argument, 3 given"),
    (lambda e, c: encoderlab.finetune(c, "t.yaml", lr=1e-3, seed=True), "finetune: argument seed=True: takes a num"),
    (lambda e, c: e.embed(["a", "b"], batch_size=0), "Encoder.embed: argument batch_size=0: input should be greater"),
    (lambda e, c: e.embed(t for t in ["a"]), "Encoder.embed: argument texts=<generator"),
    (lambda e, c: e.tokenize([1, 2]), "Encoder.tokenize: argument texts=[1, 2]: takes a text or a list of texts"),
    (lambda e, c: e.tokenize(["a"], max_length=2), "max_length=2: give 3"),
    (lambda e, c: e.tokenize(["a"], max_length=10_000), "max_length=10000: give 3 (<bos>, a token of text, <eos>)"),
    (lambda e, c: encoderlab.finetune(c, ["t.yaml"], lr=1e-3), "finetune: argument task=['t.yaml']: takes a path"),
    (lambda e, c: encoderlab.finetune(c, "t.yaml", lr=float("nan")), "lr=nan: the learning rate must be a finite"),
    (lambda e, c: encoderlab.sweep(c, None), "sweep: argument tasks=None: takes a task or a list of tasks"),
    (lambda e, c: encoderlab.sweep(c, []), "no task given"),
    (lambda e, c: encoderlab.sweep(c, ["offline", "t.yaml"]), "task 'offline': no offline task is prepared"),
    (lambda e, c: encoderlab.sweep(c, ["t.yaml"]), "task file not found: "),  # was "config file not found"
    (lambda e, c: encoderlab.finetune(c, "sst2.yaml", lr=1e-3),
     "sst2.yaml' read from the current folder); 'sst2', without .yaml, is the paper's dataset of that name"),
    (lambda e, c: encoderlab.pretrain("x.yaml", {"data.path": object()}), "overrides['data.path']: object is not"),
    (lambda e, c: encoderlab.pretrain("x.yaml", "train.steps=3"), "overrides='train.steps=3': takes a mapping"),
    (lambda e, c: e.embed(["a"], device="cpu"),
     "Encoder.embed: unexpected argument device='cpu': it takes texts, batch_size, max_length, normalize"),
    (lambda e, c: e.embed(["a"], show_progress_bar=False, device="cpu"),
     "unexpected arguments show_progress_bar=False, device='cpu': it takes texts,"),
    (lambda e, c: encoderlab.sweep(c, ["t.yaml"], bogus=1), "sweep: unexpected argument bogus=1: it takes checkpoint,"),
    (lambda e, c: encoderlab.pretrain("x.yaml", steps=3),
     "pretrain: unexpected argument steps=3: it takes config, overrides, resume, log, show_progress"),
])
def test_bad_arguments_are_one_line(enc, checkpoint, call, says):
    with pytest.raises(EncoderlabError) as caught:
        call(enc, checkpoint)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_override_is_blamed_on_the_overrides_argument():
    from encoderlab.core.config import ConfigError
    from encoderlab.core.io import CONFIGS

    for given, says in (({"train.stepz": 3}, 'overrides={"train.stepz": 3}: train.stepz: unknown key'),
                        ({"train.steps": "abc"}, 'overrides={"train.steps": "abc"}: train.steps: Input should be'),
                        ({"model.num_attention_heads": 3}, 'overrides={"model.num_attention_heads": 3}: '
                         "model.num_attention_heads: with preset 'micro', hidden_size=128 must be divisible by "
                         "num_attention_heads=3")):
        with pytest.raises(ConfigError) as caught:
            encoderlab.pretrain(CONFIGS / "pretrain" / "cpu-study.yaml", given)
        assert str(caught.value).startswith(says) and "--set" not in str(caught.value)


def test_overrides_given_as_strings_are_named_overrides_not_set(monkeypatch):
    """`overrides=["optim.lr=[1"]` was refused as `--set value '[1' is not valid YAML`, and a schedule section merged
    by a string override told the caller to replace it `with --set 'lr_schedule!=...'`: options of the command line
    the caller never used."""
    from encoderlab.core.config import ConfigError
    from encoderlab.core.errors import CALLER
    from encoderlab.core.io import CONFIGS
    from encoderlab.pretraining import distributed

    config = CONFIGS / "pretrain" / "cpu-study.yaml"
    for given, says in ((["optim.lr=[1"], "overrides value '[1' is not valid YAML"),
                        (["lr_schedule={kind: cosine, decay_steps: 3}"],
                         'a mapping in overrides updates the file\'s section key by key: replace the whole section '
                         'with overrides={"lr_schedule!": {kind: cosine, ...}}, or drop decay_steps')):
        with pytest.raises(ConfigError) as caught:
            encoderlab.pretrain(config, given)
        assert says in str(caught.value) and "--set" not in str(caught.value)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    token = CALLER.set("api")  # as during an API call (`checked`), here a pretrain under torchrun
    try:
        with pytest.raises(distributed.DistributedError) as caught:
            distributed.init("none", torch.device("cpu"))
    finally:
        CALLER.reset(token)
    assert str(caught.value).endswith('set overrides={"train.parallel": ddp} or fsdp2')


def test_a_command_to_run_first_is_named_as_the_api_function(tmp_path, packed_dir):
    """A llama folder given to `load` or continued by `pretrain` was sent to `encoderlab import-hf ... --out CKPT`,
    a command the Python caller is not running: the API names its own function."""
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(EncoderlabError) as caught:
        encoderlab.load(folder)
    assert (f"import it first (encoderlab.import_hf('{folder}', out=CKPT)), then give CKPT in its place"
            in str(caught.value))
    run = {"name": "x", "out_dir": str(tmp_path / "runs"), "data": {"path": str(packed_dir)},
           "init": {"from_weights": str(folder)},
           "lr_schedule": {"warmup_steps": 1, "decay_steps": 1}, "train": {"steps": 2, "global_batch": 2}}
    with pytest.raises(EncoderlabError) as caught:
        encoderlab.pretrain(run, log=lambda m: None)
    assert str(caught.value).endswith(f"import it first (encoderlab.import_hf('{folder}', out=CKPT)), then continue "
                                      "it with init.from_weights=CKPT")


def test_options_are_named_as_the_caller_gives_them():
    from encoderlab.core.errors import CALLER, option, option_name

    def said() -> list[str]:
        return [option("force"), option("out", Path("a b")), option("workers", 1), option_name("save-models"),
                option("set", "name=...", "init.branch_from=PATH")]
    assert said() == ["--force", "--out a b", "--workers 1", "--save-models",
                      "--set name=... --set init.branch_from=PATH"]
    token = CALLER.set("api")
    try:
        assert said() == ["force=True", "out='a b'", "workers=1", "save_models",
                          'overrides={"name": ..., "init.branch_from": PATH}']
    finally:
        CALLER.reset(token)


def test_deeper_refusals_name_the_api_arguments(enc):
    """Refusals made far below the entry point (an export kind that cannot hold the model, a fine-tuned model no
    stock class computes, mteb's MODEL) read the caller from the context the API sets."""
    from encoderlab.core.errors import CALLER, argument
    from encoderlab.hub.hf import refusal
    from encoderlab.tasks.registry import not_saved

    normed = enc.config.model_copy(update={"qk_norm": True})
    said = lambda: [refusal(normed, "eurobert"), not_saved(), argument("model", "m")]  # noqa: E731
    assert said() == ["--as eurobert cannot hold this model's qk_norm=True: export it --as qwen3 (bidirectional "
                      "Qwen3Model) or --as sentence-transformers",
                      "nothing was run: leave --save / --save-models out to fine-tune and record it", "MODEL m"]
    token = CALLER.set("api")
    try:
        assert said() == ["kind='eurobert' cannot hold this model's qk_norm=True: export it kind='qwen3' "
                          "(bidirectional Qwen3Model) or kind='sentence-transformers'",
                          "nothing was run: leave save / save_models out to fine-tune and record it", "model='m'"]
    finally:
        CALLER.reset(token)


def test_refusals_name_the_api_arguments_not_the_options(checkpoint, packed_dir, tmp_path):
    (tmp_path / "out" / "kept").mkdir(parents=True)
    with pytest.raises(EncoderlabError, match=r"^out='.*/out' exists and is not empty: pass force=True to replace it$"):
        encoderlab.export(checkpoint, tmp_path / "out", log=lambda m: None)
    with pytest.raises(EncoderlabError, match=r"^engine='batched' trains a task's runs together in one process: use "
                                              r"it with workers=1, or engine='sequential'/auto"):
        encoderlab.sweep(checkpoint, ["t.yaml"], engine="batched", workers=2, log=lambda m: None)
    again = {"name": checkpoint.name, "out_dir": str(checkpoint.parent), "data": {"path": str(packed_dir)},
             "model": TINY_MODEL, "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
             "train": {"steps": 2, "global_batch": 4, "dtype": "fp32", "eval_batches": 1, "tensorboard": False}}
    says = (r"already holds a run \(last checkpoint step-\d+\): pass resume=True to continue it or choose another "
            r'name \(overrides=\{"name": \.\.\.\}\)$')
    with pytest.raises(EncoderlabError, match=says):
        encoderlab.pretrain(again, log=lambda m: None)
    from encoderlab.core.errors import CALLER
    assert CALLER.get() == "cli"  # the command line's spelling again once the API call returned


def test_finetune_and_sweep_save_models_as_their_commands_do(checkpoint, classification_task, tmp_path):
    """`finetune(save=)` and `sweep(save_models=, models=)` are the commands' `--save` and `--save-models --models`."""
    task, quiet = classification_task(tmp_path / "task"), {"log": lambda m: None, "out": tmp_path / "evals"}
    small = {"max_steps": 2, "batch_size": 4, "max_length": 32, "dtype": "fp32", "classification_head": "dense_gelu",
             "lrs": [1e-3], "seeds": [0]}
    encoderlab.finetune(checkpoint, task, lr=1e-3, overrides=small, save=tmp_path / "kept", **quiet)
    assert (tmp_path / "kept" / "config.json").is_file()
    encoderlab.sweep(checkpoint, task, overrides=small, save_models="all", models=tmp_path / "models", **quiet)
    assert len(list((tmp_path / "models").rglob("config.json"))) == 1
    with pytest.raises(EncoderlabError, match=r"^save_models='best': give one of none, chosen, all$"):
        encoderlab.sweep(checkpoint, task, save_models="best", **quiet)


def test_override_values_may_be_paths_and_numpy_numbers():
    import numpy as np

    from encoderlab.core.arguments import set_strings

    assert set_strings({"data.path": Path("/d/p"), "train.steps": np.int64(3), "optim.betas": (0.9, 0.95)}) == [
        'data.path="/d/p"', "train.steps=3", "optim.betas=[0.9, 0.95]"]


def takes(vocab: int, *, docs: Positive | None = None, workers: Positive | str = 1, lr: float = 0.1):
    return vocab, docs, workers, lr


def test_a_whole_float_is_the_int_it_holds_for_every_int_argument(tmp_path):
    """`prepare_data(max_documents=1e6)` was refused where `overrides={"train.steps": 1e3}` was taken: a float that is
    a whole number counts as that int wherever an argument takes a whole number; 1.5 is still refused."""
    import inspect

    from encoderlab import api

    assert [(v, type(v)) for v in checked(takes)(8e3, docs=1e6, workers=2.0, lr=1.0)] == [
        (8000, int), (1_000_000, int), (2, int), (1.0, float)]
    for bad, says in (({"docs": 1.5}, "takes: argument docs=1.5: takes a whole number"),
                      ({"workers": float("inf")}, "takes: argument workers=inf: takes a whole number")):
        with pytest.raises(EncoderlabError) as caught:
            checked(takes)(1, **bad)
        assert str(caught.value).startswith(says) and "\n" not in str(caught.value), str(caught.value)
    with pytest.raises(EncoderlabError, match=r"^prepare_data: argument max_documents=1.5: takes a whole number"):
        encoderlab.prepare_data(tmp_path / "none.txt", tmp_path / "d", max_documents=1.5)
    with pytest.raises(EncoderlabError) as caught:  # taken: refused for the missing corpus, not for the numbers
        encoderlab.prepare_data(tmp_path / "none.txt", tmp_path / "d", max_documents=1e6, vocab_size=8192.0)
    assert "max_documents" not in str(caught.value) and "vocab_size" not in str(caught.value), str(caught.value)
    functions = [*(getattr(api, name) for name in api.__all__), api.Encoder.tokenize, api.Encoder.embed]
    ints = {f"{fn.__name__}.{name}" for fn in functions if hasattr(fn, "__wrapped__")
            for name in inspect.signature(fn).parameters if type(whole_numbers(fn, (), {name: 2.0})[1][name]) is int}
    assert ints == {"prepare_data.vocab_size", "prepare_data.seq_len", "prepare_data.max_documents", "sweep.workers",
                    "finetune.seed", "run_study.workers", "import_hf.head_seed", "mteb.batch_size",
                    "tokenize.max_length", "embed.batch_size", "embed.max_length"}


def test_numpy_arrays_in_overrides_are_lists():
    """A 1-d numpy array (`optim.betas=np.array([0.9, 0.95])`) was refused naming its type: it is the list it holds,
    a 0-d one the number; an array of more dimensions is refused in one line naming the key."""
    import numpy as np

    from encoderlab.core.arguments import set_strings

    assert set_strings({"optim.betas": np.array([0.9, 0.95]), "train.steps": np.array(3), "x": np.float32(0.5),
                        "optim": {"betas": np.array([0.8, 0.9])}, "lrs": [np.float64(1e-3)]}) == [
        "optim.betas=[0.9, 0.95]", "train.steps=3", "x=0.5", 'optim={"betas": [0.8, 0.9]}', "lrs=[0.001]"]
    with pytest.raises(EncoderlabError) as caught:
        set_strings({"optim": {"betas": np.zeros((2, 2))}})
    assert str(caught.value) == ("overrides['optim']['betas']: a 2-d array is not a config value (give a list, a 1-d "
                                 "array or a number)")


@pytest.mark.parametrize(("call", "says"), [
    (lambda c: encoderlab.sweep("nope", ["rt-polarity"]), "checkpoint='nope': {t}/nope ('nope' read from the "
     "current folder) is neither an encoderlab checkpoint"),
    (lambda c: encoderlab.finetune(Path("nope"), "rt-polarity", lr=1e-3), "checkpoint='nope': {t}/nope "),
    (lambda c: encoderlab.finetune(c, "none.yaml", lr=1e-3), "task='none.yaml': task file not found: {t}/none.yaml"),
    (lambda c: encoderlab.sweep(c, "none.yaml"), "tasks='none.yaml': task file not found: {t}/none.yaml"),
    (lambda c: encoderlab.sweep(c, ["sst2", Path("none.yaml")]),
     "tasks[1]='none.yaml': task file not found: {t}/none.yaml"),
    (lambda c: encoderlab.sweep(c, ["rt-polarity"], protocol="none.yaml"),
     "protocol='none.yaml': config file not found: {t}/none.yaml"),
    (lambda c: encoderlab.load("./nope"), "checkpoint='./nope': {t}/nope ('nope' read from the current folder)"),
    (lambda c: encoderlab.export("nope", "out"), "checkpoint='nope': {t}/nope ('nope' read from the current folder) "
     "is neither a checkpoint folder"),
    (lambda c: encoderlab.import_hf("nope", "out"), "source='nope': nope: no such file or folder"),
    (lambda c: encoderlab.prepare_data("none.txt", "d"), "source='none.txt': no such file or directory: none.txt"),
    (lambda c: encoderlab.prepare_data("offline", "d", tokenizer="none.json"),
     "tokenizer='none.json': tokenizer not found: {t}/none.json"),
    (lambda c: encoderlab.pretrain("none.yaml"), "config='none.yaml': config file not found: {t}/none.yaml"),
    (lambda c: encoderlab.run_study("none.yaml"), "study='none.yaml': config file not found: {t}/none.yaml"),
    (lambda c: encoderlab.report_study("none"), "folder='none': none is not a study folder (no plan.json)"),
])
def test_a_missing_path_is_named_by_its_argument(checkpoint, tmp_path, monkeypatch, call, says):
    """A refusal of a path that is not there named the path and not the argument that gave it (`sweep(checkpoint=
    'nope')` said only where it looked), where the API's other refusals name their argument."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EncoderlabError) as caught:
        call(checkpoint)
    assert str(caught.value).startswith(says.format(t=tmp_path)), str(caught.value)


def test_a_missing_path_no_argument_gave_is_not_named_as_one(tmp_path, monkeypatch):
    """Only a path an argument gave is named by it: a config's path, and the command line, say the path alone."""
    from encoderlab.core.errors import given_as

    monkeypatch.chdir(tmp_path)
    config = {"name": "nope", "out_dir": "runs", "data": {"path": "nope"}, "train": {"steps": 9, "global_batch": 2},
              "lr_schedule": {"warmup_steps": 1, "decay_steps": 1}}
    with pytest.raises(EncoderlabError) as caught:
        encoderlab.pretrain(config, log=lambda m: None)
    said = str(caught.value)  # (its hint names `out='nope'`, the prepare_data argument that makes the data there)
    assert "nope" in said and "config=" not in said and "='nope': " not in said
    assert given_as("nope") == ""  # outside an API call: the command line's refusals are as they were


def test_tokenize_frames_and_embed_is_the_retrieval_embedding(enc):
    from encoderlab.tasks.base import mean_pool

    tok = enc.tokenizer
    batch = enc.tokenize(["the cat sat", "a dog ran across green fields"])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids[:, 0].tolist() == [tok.bos_id] * 2
    assert [row[m.bool()][-1].item() for row, m in zip(ids, mask)] == [tok.eos_id] * 2
    cut = enc.tokenize(["a dog ran across green fields"], max_length=4)["input_ids"][0].tolist()
    assert len(cut) == 4 and cut[0] == tok.bos_id and cut[-1] == tok.eos_id
    with torch.no_grad():
        hidden = enc.model.model(ids, causal=False, attention_mask=mask)
    expected = torch.nn.functional.normalize(mean_pool(hidden.float(), mask), dim=-1)
    assert torch.allclose(enc.embed(["the cat sat", "a dog ran across green fields"], batch_size=1), expected,
                          atol=1e-6)
    assert enc.embed([]).shape == (0, enc.config.hidden_size) and enc.tokenize([])["input_ids"].shape == (0, 0)


def test_to_transformers_computes_the_same_hidden_states(enc):
    model, hf_tok = enc.to_transformers()
    texts = ["the cat sat on a mat", "birds"]
    ours = enc.tokenize(texts)
    theirs = hf_tok(texts, padding=True, return_tensors="pt")
    assert theirs["input_ids"].tolist() == ours["input_ids"].tolist()
    with torch.no_grad():
        expected = enc.model.model(ours["input_ids"], causal=False, attention_mask=ours["attention_mask"])
        got = model(**theirs, output_hidden_states=True).hidden_states[-1]
    mask = ours["attention_mask"].bool()
    assert torch.allclose(got[mask], expected[mask], atol=1e-5)
    assert enc.tokenize(texts)["input_ids"].tolist() == ours["input_ids"].tolist()  # its own tokenizer unchanged
    with pytest.raises(EncoderlabError, match=r"^Encoder\.embed: argument batch_size=True: takes a number, not a "):
        enc.embed(texts, batch_size=True)  # pydantic would read it as 1
    with pytest.raises(EncoderlabError, match=r"^to_transformers: kind='gpt2' is not a transformers model of this "
                       r"checkpoint; choose llama, mistral, qwen2, qwen3, eurobert \("):  # named as Python gives it
        enc.to_transformers("gpt2")
    with pytest.raises(EncoderlabError, match=r"kind='sentence-transformers' is not .* export\(\.\.\., "
                       r"kind='sentence-transformers'\) and load the folder"):
        enc.to_transformers("sentence-transformers")
    with pytest.raises(EncoderlabError, match=r"^attention='causal': kind='eurobert' is a bidirectional encoder"):
        enc.to_transformers("eurobert", attention="causal")


def test_an_export_notes_a_poor_fit_as_a_python_warning(checkpoint, tmp_path):
    """An MLM-trained checkpoint exported as a causal Llama: the command line says `note: ...` on stderr; from
    Python it was a line of `log` (stdout by default) and is an EncoderlabWarning at the caller's line, as the
    API's other warnings are; the summary still holds it."""
    said: list[str] = []
    with pytest.warns(encoderlab.EncoderlabWarning, match="last trained with mlm") as caught:
        summary = encoderlab.export(checkpoint, tmp_path / "llama", kind="llama", attention="causal", log=said.append)
    assert "last trained with mlm" in summary["note"] and not [line for line in said if "last trained" in line]
    assert [w.filename for w in caught] == [__file__]


def test_an_encoder_shows_itself_in_one_short_line(enc, tmp_path):
    """repr(Encoder) was the dataclass's: the model's whole module tree, its config and its tokenizer, thousands of
    characters in a notebook. It says what it is, as sentence-transformers' does: the folder, the model type, its
    shape and size, and the device."""
    from test_transformers_encoders import write_encoder

    body = sum(p.numel() for p in enc.model.model.parameters())
    assert repr(enc) == (f"Encoder(path='{enc.path}', model_type='encoderlab', layers=2, hidden_size=32, "
                         f"parameters={body / 1e3:.1f}K, device='cpu')")
    bert = encoderlab.load(write_encoder(tmp_path / "bert", "bert"))
    body = sum(p.numel() for p in bert.model.model.parameters())
    assert repr(bert) == (f"Encoder(path='{tmp_path / 'bert'}', model_type='bert', layers=2, hidden_size=32, "
                          f"parameters={body / 1e3:.1f}K, device='cpu')")


def test_the_package_exposes_the_api_and_nothing_else():
    assert [n for n in dir(encoderlab) if not n.startswith("__")] == sorted(encoderlab.API)
    assert encoderlab.pretrain.__module__ == "encoderlab.api"
    assert encoderlab.EncoderlabError is EncoderlabError  # what every function raises, caught from the package


def _junk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("mine")
    return folder


def _summary(folder: Path, fields: dict) -> Path:
    (folder / "summary.json").write_text(json.dumps({"tasks": {}, **fields}))
    return folder / "summary.json"


def _jsonl(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "c.jsonl").write_text('{"body": "a b c"}\n')
    return folder / "c.jsonl"


@pytest.mark.parametrize(("call", "says"), [
    (lambda c, t: encoderlab.export(c, t / "e", kind="gpt"), "kind='gpt' is not an export format"),
    (lambda c, t: encoderlab.export(c, t / "e", attention="up"), "attention='up': choose bidirectional or causal"),
    (lambda c, t: encoderlab.export(c, t / "e", kind="eurobert", attention="causal"),
     "attention='causal': kind='eurobert' is a bidirectional encoder; a causal export is kind='llama', mistral"),
    (lambda c, t: encoderlab.export(c, t / "e", evaluation=t / "none.json"),
     "evaluation='{t}/none.json': no such file or folder (give the summary.json that `encoderlab.sweep(...)` "
     "writes, or its out folder)"),
    (lambda c, t: encoderlab.sweep(c, ["t.yaml"], workers="many"),
     "workers='many': give 'auto' or a whole number, 1 or more"),
    (lambda c, t: encoderlab.sweep(c, ["t.yaml"], workers=0),
     "sweep: argument workers=0: takes a whole number, 1 or more, or 'auto'"),
    (lambda c, t: encoderlab.sweep(c, ["t.yaml"], engine="fast"), "engine='fast' is not one of auto, sequential, "),
    (lambda c, t: encoderlab.finetune(c, "t.yaml", lr=1e-3, save=_junk(t / "kept")),
     "save='{t}/kept' exists and holds something other than a saved fine-tuned model"),
    (lambda c, t: encoderlab.prepare_data(_jsonl(t / "src"), t / "d", text_column="text"),
     "has no column 'text' (it has: body); pass text_column with one"),
    (lambda c, t: encoderlab.export(c, t / "e", evaluation=_junk(t / "evals")),
     "(expected {t}/evals/" + "{tag}/PROTOCOL/summary.json, as `encoderlab.sweep(CKPT, TASKS, out='{t}/evals')` "
     "writes)"),
    (lambda c, t: encoderlab.export(c, t / "e", evaluation=_summary(t, {"weights_sha256": "0" * 64})),
     "give the evaluation of these weights, or run `encoderlab.sweep('{c}', TASKS)`"),
    (lambda c, t: encoderlab.export(c, t / "e", evaluation=_summary(t, {})),
     "names no weights_sha256 (its weights are unknown; `encoderlab.sweep(...)` writes it again)"),
])
def test_shared_checks_name_the_api_arguments(checkpoint, tmp_path, call, says):
    """A check the command line and the API share is told by its caller how to name what it refuses: `kind='gpt'`,
    never `--as 'gpt'`, from Python."""
    from encoderlab.finetuning.records import checkpoint_tag
    from encoderlab.runs.checkpoint import resolve

    with pytest.raises(EncoderlabError) as caught:
        call(checkpoint, tmp_path)
    said = str(caught.value)
    says = says.format(t=tmp_path, c=resolve(checkpoint), tag=checkpoint_tag(resolve(checkpoint)))
    assert says in said and " --" not in said and not said.startswith("--") and "encoderlab sweep" not in said, said


def test_mteb_names_its_arguments(checkpoint, tmp_path):
    pytest.importorskip("mteb", reason="the mteb extra is not installed (pip install 'encoderlab[mteb]')")
    with pytest.raises(EncoderlabError, match=r"^model=.*/none' does not exist or is not a folder"):
        encoderlab.mteb(tmp_path / "none", ["tiny-ir"], tmp_path / "m", log=lambda m: None)
    with pytest.raises(EncoderlabError, match=r"^no task given: tasks names offline tasks"):
        encoderlab.mteb(checkpoint, [], tmp_path / "m", log=lambda m: None)


@pytest.mark.parametrize(("call", "says"), [
    (lambda e, c: encoderlab.pretrain("x.yaml", resume="yes"), "pretrain: argument resume='yes': takes True or False"),
    (lambda e, c: encoderlab.pretrain("x.yaml", resume=1), "pretrain: argument resume=1: takes True or False"),
    (lambda e, c: encoderlab.pretrain(b"x.yaml"), "pretrain: argument config=b'x.yaml': takes a path (str or Path) "),
    (lambda e, c: encoderlab.load(b"path"), "load: argument checkpoint=b'path': takes a path (str or Path)"),
    (lambda e, c: encoderlab.sweep(c, b"t.yaml"), "sweep: argument tasks=b't.yaml': takes a task or a list of tasks"),
    (lambda e, c: encoderlab.sweep(c, [b"t.yaml"]), "sweep: argument tasks=[b't.yaml']: takes a task or a list of "),
    (lambda e, c: encoderlab.finetune(c, "t.yaml", lr="1e-3"), "finetune: argument lr='1e-3': takes a number"),
    (lambda e, c: encoderlab.prepare_data("c.txt", force="no"), "prepare_data: argument force='no': takes True or "),
    (lambda e, c: encoderlab.mteb(c, b"tiny-ir", "m"), "mteb: argument tasks=b'tiny-ir': takes a task name or a list "),
    (lambda e, c: e.embed(b"a text"), "Encoder.embed: argument texts=b'a text': takes a text or a list of texts"),
    (lambda e, c: e.embed(["a"], normalize="no"), "Encoder.embed: argument normalize='no': takes True or False"),
    (lambda e, c: e.embed(["a"], batch_size=2.5), "Encoder.embed: argument batch_size=2.5: takes a whole number"),
])
def test_loose_types_are_refused_not_converted(enc, checkpoint, call, says):
    """pydantic's lax mode would read "yes" as True, b"path" as "path" and "1e-3" as 0.001: refused, naming the
    argument and the type it takes."""
    with pytest.raises(EncoderlabError) as caught:
        call(enc, checkpoint)
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value), str(caught.value)


def test_numpy_numbers_and_one_task_are_taken_as_documented(enc, checkpoint):
    """A numpy number is the number it holds (a notebook's `np.arange`), and one task given alone is a list of one."""
    import numpy as np

    assert enc.embed(["a", "b"], batch_size=np.int64(1), normalize=np.bool_(False)).shape == (2, enc.config.hidden_size)
    for alone, listed in (("none.yaml", ["none.yaml"]), (Path("none.yaml"), [Path("none.yaml")])):
        with pytest.raises(EncoderlabError) as one:
            encoderlab.sweep(checkpoint, alone, log=lambda m: None)
        with pytest.raises(EncoderlabError) as many:
            encoderlab.sweep(checkpoint, listed, log=lambda m: None)
        said = [str(e.value).partition(": ") for e in (one, many)]  # named as given: tasks='none.yaml', tasks[0]=...
        assert said[0][2] == said[1][2] and "none.yaml" in said[0][2], said
        assert (said[0][0], said[1][0]) == ("tasks='none.yaml'", "tasks[0]='none.yaml'")


def test_a_path_like_object_is_a_path(checkpoint):
    """Any os.PathLike of a text path is taken as the path it names (strict checking refused all but str and
    Path); one of bytes is not."""
    class Located:
        def __init__(self, path):
            self.path = path

        def __fspath__(self):
            return self.path

    assert encoderlab.load(Located(str(checkpoint))).config == encoderlab.load(checkpoint).config
    with pytest.raises(EncoderlabError, match="argument"):
        encoderlab.load(Located(str(checkpoint).encode()))


def test_a_transformers_encoders_model_is_a_torch_module_that_moves(tmp_path):
    """`Encoder.model` of a transformers folder was a SimpleNamespace: `enc.model.to(...)`, `.eval()` and
    `.parameters()` raised AttributeError where the docs call it a torch module, as a checkpoint's is."""
    import torch
    from test_transformers_encoders import write_encoder

    bert = encoderlab.load(write_encoder(tmp_path / "bert", "bert"))
    assert isinstance(bert.model, torch.nn.Module) and not bert.model.training
    before = bert.embed(["a river village"])
    bert.model.to(torch.float64)
    assert next(bert.model.model.parameters()).dtype == torch.float64
    assert torch.allclose(bert.embed(["a river village"]), before, atol=1e-5)  # float32 whatever the body's dtype
