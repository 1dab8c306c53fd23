"""Models from outside encoderlab given where they do not belong, or in a layout of their own: tiny random
transformers encoders (test_transformers_encoders.write_encoder) given to import-hf are sent to the commands that
read them as they are, in one line; a sentence-transformers folder of the older layout (the model in 0_Transformer/)
is read from the module its modules.json names."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_authors_protocol import write_tasks
from test_transformers_encoders import SIZES, write_encoder

from conftest import run_command


def _one_line(monkeypatch, capsys, *args) -> str:
    code, out, err = run_command(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("model_type", ["bert", "roberta", "deberta-v2", "modernbert"])
def test_import_hf_sends_an_encoder_read_as_it_is_to_finetune(tmp_path, monkeypatch, capsys, model_type):
    """import-hf is for the families encoderlab's backbone computes; a BERT-like folder is fine-tuned, swept and
    scored by MTEB as it is, so the refusal names those commands rather than listing the families alone."""
    folder = write_encoder(tmp_path / model_type, model_type)
    err = _one_line(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out")
    assert f"{folder}: a {model_type} encoder needs no import" in err
    assert f"encoderlab finetune/sweep {folder} TASK" in err and f"encoderlab mteb {folder}" in err
    assert "import-hf is for the families encoderlab computes with its own backbone (llama, " in err
    assert not (tmp_path / "out").exists()


def test_import_hf_sends_a_named_encoder_to_finetune_without_fetching_it(tmp_path, monkeypatch, capsys):
    from encoderlab.data import wheels

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(wheels, "fetch", lambda *a, **k: pytest.fail("the wheel is fetched"))
    err = _one_line(monkeypatch, capsys, "import-hf", "minilm-l6", "--out", tmp_path / "out")
    assert "minilm-l6: the named encoder minilm-l6 needs no import" in err and "finetune/sweep minilm-l6" in err


def old_layout(folder: Path, module: str = "0_Transformer") -> Path:
    """A sentence-transformers folder as older versions saved one: modules.json and 1_Pooling/ at the top, the
    transformers model (config.json, weights, tokenizer) in `module`/."""
    write_encoder(folder / module, "bert")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": module, "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                 "pooling_mode_mean_tokens": True}))
    return folder


def test_a_sentence_transformers_folder_of_the_older_layout_is_read_from_its_transformer_module(
        tmp_path, monkeypatch, capsys, one_thread):
    """The newer layout keeps the model at the top, where every command reads it; the older one keeps it in
    0_Transformer/, which modules.json names: the top folder is read as that module, as sentence-transformers reads
    it (fine-tuning and the API read the body; MTEB loads the whole folder, pooling included)."""
    import encoderlab
    from encoderlab.runs.encoders import encoder_digest, resolve_encoder

    home = tmp_path / "home"
    write_tasks(home / "data" / "offline" / "tasks")
    top = old_layout(tmp_path / "st-old")
    module = top / "0_Transformer"
    assert resolve_encoder(top) == module
    texts = ["the cat sat on a mat", "zanzibar quetzal"]
    assert torch.equal(encoderlab.load(top).embed(texts), encoderlab.load(module).embed(texts))
    code, _, err = run_command(monkeypatch, capsys, "finetune", top, "toy-pairs", "--lr", "1e-3", "--out",
                               tmp_path / "evals", *(x for s in SIZES for x in ("--set", s)), home=home)
    assert code == 0, err
    assert "needs no import" in _one_line(monkeypatch, capsys, "import-hf", top, "--out", tmp_path / "out")
    pytest.importorskip("mteb")
    from encoderlab.hub.mteb_eval import SENTENCE_TRANSFORMERS, model_kind, weights_of

    found = model_kind(top)
    assert (found.path, found.kind) == (top, SENTENCE_TRANSFORMERS)  # its pooling is the folder's own
    assert weights_of(found) == encoder_digest(module)  # a study's MTEB job is done for the module's files


@pytest.mark.parametrize("given", ["st-old", "./st-old/"])
def test_import_hf_names_an_older_layout_folder_as_given_not_its_module(tmp_path, monkeypatch, capsys, given):
    """A BERT in 0_Transformer/ needs no import, and every command it is sent to reads the top folder: the commands
    it suggests name the folder as the user gave it, not `st-old/0_Transformer`."""
    import encoderlab
    from encoderlab.core.errors import EncoderlabError

    old_layout(tmp_path / "st-old")
    monkeypatch.chdir(tmp_path)
    err = _one_line(monkeypatch, capsys, "import-hf", given, "--out", "out")
    assert err.startswith(f"error: {given}: a bert encoder needs no import: "), err
    assert f"finetune/sweep {given} TASK ..., encoderlab mteb {given} --tasks" in err, err
    assert f"init.from_weights: {given} to pretrain" in err and "0_Transformer" not in err, err
    with pytest.raises(EncoderlabError) as caught:
        encoderlab.import_hf(given, "out", log=lambda m: None)
    said = str(caught.value)
    assert said.startswith(f"{given}: a bert encoder needs no import") and "0_Transformer" not in said, said
    assert f"encoderlab.finetune/sweep({given!r}, TASK, ...)" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how, says", [
    ("outside", "modules.json puts the Transformer module in ../elsewhere, outside {top} (it leads to "
                "{tmp}/elsewhere)"),
    ("linked-outside", "modules.json puts the Transformer module in 0_Transformer, outside {top} (it leads to "
                       "{tmp}/elsewhere)"),
    ("no-config", "modules.json puts the Transformer module in 0_Transformer, which holds no config.json"),
    ("no-module", "holds no config.json, and its modules.json names no sentence-transformers Transformer module"),
    ("not-a-list", "modules.json: not the module list sentence-transformers writes (a list of objects"),
    ("empty", "modules.json is empty"),
    ("bom", "modules.json is not JSON (Unexpected UTF-8 BOM"),
])
def test_a_module_list_that_leads_to_no_model_is_refused_in_one_line(tmp_path, monkeypatch, capsys, how, says):
    top = old_layout(tmp_path / "st-old")
    modules = json.loads((top / "modules.json").read_text())
    if how == "outside":
        write_encoder(tmp_path / "elsewhere", "bert")
        modules[0]["path"] = "../elsewhere"
    elif how == "no-config":
        (top / "0_Transformer" / "config.json").unlink()
    elif how == "linked-outside":  # a link is followed, as sentence-transformers follows it: it leads outside
        write_encoder(tmp_path / "elsewhere", "bert")
        shutil.rmtree(top / "0_Transformer")
        (top / "0_Transformer").symlink_to(tmp_path / "elsewhere")
    elif how == "no-module":
        modules = modules[1:]
    text = json.dumps(modules if how != "not-a-list" else {"0": modules[0]})
    (top / "modules.json").write_text({"empty": "", "bom": "\ufeff" + text}.get(how, text))
    for command in (("finetune", top, "toy-pairs", "--lr", "1e-3", "--out", tmp_path / "evals"),
                    ("import-hf", top, "--out", tmp_path / "out")):
        assert says.format(top=top, tmp=tmp_path) in _one_line(monkeypatch, capsys, *command)
    assert not (tmp_path / "evals").exists() and not (tmp_path / "out").exists()
    from types import SimpleNamespace

    from encoderlab.core.errors import EncoderlabError
    from encoderlab.pretraining.continued import transformers_source

    with pytest.raises(EncoderlabError) as caught:  # continued pretraining blames the key, as its other refusals do
        transformers_source(SimpleNamespace(init=SimpleNamespace(from_weights=str(top))))
    said = str(caught.value)
    assert said.startswith(f"init.from_weights={top}: ") and says.format(top=top, tmp=tmp_path) in said, said


def test_a_study_and_continued_pretraining_read_the_older_layout_from_its_module(tmp_path):
    """`checkpoints: {NAME: FOLDER}` in a study and `init.from_weights: FOLDER` take what fine-tuning takes."""
    from types import SimpleNamespace

    from encoderlab.core.config import ConfigError
    from encoderlab.pretraining.continued import transformers_source
    from encoderlab.study.existing import locate

    top = old_layout(tmp_path / "st-old")
    module = top / "0_Transformer"
    spec = SimpleNamespace(name="s", checkpoints={"st": str(top)})
    assert locate(spec, tmp_path, tmp_path / "study") == {"st": module.resolve()}
    assert transformers_source(SimpleNamespace(init=SimpleNamespace(from_weights=str(top)))) == module
    (module / "config.json").unlink()
    with pytest.raises(ConfigError, match="checkpoints.st: .*puts the Transformer module in 0_Transformer"):
        locate(spec, tmp_path, tmp_path / "study")


# What transformers prints by itself: progress bars and the lines of its logger (a load report, notes).
TRANSFORMERS_NOISE = ("Loading weights", "Writing model shards", "it/s]", "[transformers]", "LOAD REPORT", "UNEXPECTED")


def test_fine_tuning_and_saving_a_transformers_folder_leave_transformers_quiet(tmp_path, monkeypatch, capfd,
                                                                                 one_thread):
    """stderr holds encoderlab's own lines: transformers' bars and log lines while a BERT folder is loaded and its
    fine-tuned model saved (`--save`) are kept off it, and its settings are as they were afterwards."""
    from transformers.utils import logging as hf_logging

    home = tmp_path / "home"
    write_tasks(home / "data" / "offline" / "tasks")
    folder = write_encoder(tmp_path / "bert", "bert")
    before = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    code, _, err = run_command(monkeypatch, capfd, "finetune", folder, "toy-ir", "--lr", "1e-3", "--out",
                               tmp_path / "evals", "--save", tmp_path / "kept",
                               *(x for s in SIZES for x in ("--set", s)), home=home)
    assert code == 0 and (tmp_path / "kept" / "model.safetensors").is_file(), err
    assert "saved toy-ir" in err and not [n for n in TRANSFORMERS_NOISE if n in err], err
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before


def test_mteb_loads_a_folder_with_its_masked_lm_head_quietly(tmp_path, capfd):
    """A BERT folder as it is published holds its masked-LM head and no pooler: sentence-transformers' load made
    transformers print a bar and a 12-line load report of those weights, which fine-tuning's checks had judged."""
    pytest.importorskip("mteb")
    from transformers import AutoConfig, BertForMaskedLM

    from encoderlab.hub.mteb_eval import model_kind, sentence_model

    folder = write_encoder(tmp_path / "bert-mlm", "bert")
    torch.manual_seed(0)
    BertForMaskedLM(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    found = model_kind(folder)
    capfd.readouterr()
    sentence_model(found, tmp_path, log=print)
    err = capfd.readouterr().err
    assert not [n for n in TRANSFORMERS_NOISE if n in err], err


def test_quiet_transformers_keeps_its_errors_and_restores_its_settings():
    import io
    import logging

    from transformers.utils import logging as hf_logging

    from encoderlab.core.quiet import quiet_transformers

    # A handler of the test's own: transformers' default one holds whichever stderr it first saw (under pytest, an
    # earlier test's capture), so what it writes is not this test's to read.
    seen = io.StringIO()
    handler = logging.StreamHandler(seen)
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    logger = hf_logging.get_logger("transformers.modeling_utils")
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    try:
        with quiet_transformers():
            assert not hf_logging.is_progress_bar_enabled()
            logger.warning("a note nobody needs")
            logger.error("a real error")
            with quiet_transformers():  # nested: the outer block's settings stay
                pass
            assert not hf_logging.is_progress_bar_enabled()
    finally:
        root.removeHandler(handler)
    assert "a real error" in seen.getvalue() and "a note nobody needs" not in seen.getvalue()
    assert hf_logging.get_verbosity() == hf_logging.WARNING and hf_logging.is_progress_bar_enabled()


def test_data_is_packed_with_the_tokenizer_of_the_older_layout_for_its_continued_pretraining(tmp_path, monkeypatch,
                                                                                            capsys):
    """`data prepare --tokenizer` takes a model folder as fine-tuning does: the older layout keeps its tokenizer in
    0_Transformer/ beside the model, so the top folder was refused as holding no tokenizer (in transformers' words,
    "Couldn't instantiate the backend tokenizer from one of: "). It packs with the module's tokenizer, and the next
    step continues the folder as given, which init.from_weights reads."""
    top = old_layout(tmp_path / "st-old")
    (tmp_path / "c.txt").write_text("\n\n".join(f"the cat sat on a mat and dogs ran {i}" for i in range(300)))
    code, out, err = run_command(monkeypatch, capsys, "data", "prepare", tmp_path / "c.txt", "--out", tmp_path / "d",
                                 "--tokenizer", top, "--seq-len", "16")
    assert code == 0, err
    assert out.strip().splitlines()[-1].endswith(f"--set data.path={tmp_path / 'd' / 'packed'} --set "
                                                 f"init.from_weights={top}")
    assert "cpt-encoder.yaml" in out
