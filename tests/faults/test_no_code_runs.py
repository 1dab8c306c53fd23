"""No code from outside ever runs: a checkpoint or model folder someone else wrote is read as data only. Each test
plants a payload that would leave a mark (a pickle whose unpickling creates a file, a Python file transformers would
import), goes through the user's command, and checks the refusal is one line (exit code 2) naming the file, and the
mark is absent."""
from __future__ import annotations

import json
import pickle
import shutil
import struct

import pytest
from conftest import run_command
import torch
from runs import config, copied_run

from encoderlab.core.config import validate
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint


class Payload:
    """Unpickled, it creates the file `mark` (what arbitrary code could do)."""

    def __init__(self, mark):
        self.mark = str(mark)

    def __reduce__(self):
        return open, (self.mark, "w")


def refused(monkeypatch, capsys, *args, says: str) -> str:
    code, _, err = run_command(monkeypatch, capsys, *args)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("· ")]  # not progress
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0], lines[0]
    return lines[0]


# ---- checkpoints ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory, packed_dir):
    out = tmp_path_factory.mktemp("no-code")
    cfg = validate(PretrainConfig, config(out, packed_dir, "run", save_every=1, keep_checkpoints=1), "test")
    Trainer(cfg, show_progress=False, log=lambda message: None).run(stop_at=2)
    return out


@pytest.fixture
def run(trained, tmp_path, packed_dir):
    """A copy of the stopped run, its run.yaml, and new.yaml (another run, to branch from it)."""
    return checkpoint.latest(copied_run(trained, tmp_path, packed_dir, save_every=1, keep_checkpoints=1))


def resume_and_branch(monkeypatch, capsys, tmp_path, ckpt, says: str) -> None:
    refused(monkeypatch, capsys, "pretrain", tmp_path / "run.yaml", "--resume", says=says)
    refused(monkeypatch, capsys, "pretrain", tmp_path / "new.yaml", "--set", f"init.branch_from={ckpt}", says=says)
    assert not (tmp_path / "new").exists()


def test_a_pickle_payload_in_the_optimizer_index_never_runs(run, tmp_path, monkeypatch, capsys, one_thread):
    mark = tmp_path / "MARK"
    (run / "dcp" / ".metadata").write_bytes(pickle.dumps(Payload(mark)))
    checkpoint.write_manifest(run)  # as anyone sending the checkpoint can
    resume_and_branch(monkeypatch, capsys, tmp_path, run, f"{run / 'dcp' / '.metadata'} asks to build io.open")
    assert not mark.exists()


def test_a_pickle_payload_among_the_optimizer_values_never_runs(run, tmp_path, monkeypatch, capsys, one_thread):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    mark = tmp_path / "MARK"
    dcp_to_torch_save(run / "dcp", tmp_path / "whole.pt")
    state = torch.load(tmp_path / "whole.pt", weights_only=False)  # written just now, by this test
    state["optim"]["param_groups"][0]["lr"] = Payload(mark)
    shutil.rmtree(run / "dcp")
    dcp.save(state, checkpoint_id=run / "dcp", no_dist=True)
    checkpoint.write_manifest(run)
    resume_and_branch(monkeypatch, capsys, tmp_path, run, "as a pickle that is not plain data")
    assert not mark.exists()


def test_optimizer_data_files_outside_the_checkpoint_are_refused(run, tmp_path, monkeypatch, capsys, one_thread):
    metadata = pickle.loads((run / "dcp" / ".metadata").read_bytes())  # written by this test's own run
    for info in metadata.storage_data.values():
        info.relative_path = "../../../elsewhere.distcp"
    (run / "dcp" / ".metadata").write_bytes(pickle.dumps(metadata))
    checkpoint.write_manifest(run)
    resume_and_branch(monkeypatch, capsys, tmp_path, run, "names '../../../elsewhere.distcp' as a data file")


@pytest.mark.parametrize("planted", ["pickle", "torch-save", "cut"])
def test_optimizer_data_files_that_are_not_what_their_index_says_are_one_line(run, tmp_path, monkeypatch, capsys,
                                                                              one_thread, planted):
    mark = tmp_path / "MARK"
    data = next((run / "dcp").glob("*.distcp"))
    if planted == "pickle":
        data.write_bytes(pickle.dumps(Payload(mark)))
    elif planted == "torch-save":
        torch.save({"x": torch.zeros(3)}, data)
    else:
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    checkpoint.write_manifest(run)
    resume_and_branch(monkeypatch, capsys, tmp_path, run, f"{run / 'dcp'} is damaged")
    assert not mark.exists()


def test_a_damaged_optimizer_data_file_is_refused_as_damage_not_as_code(run, tmp_path, monkeypatch, capsys,
                                                                        one_thread):
    """A data file cut short is damage: its refusal said that encoderlab loads no code from a checkpoint and to use
    encoderlab's own checkpoints, which this one is; it names the way out of damage instead."""
    data = next((run / "dcp").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    checkpoint.write_manifest(run)
    line = refused(monkeypatch, capsys, "pretrain", tmp_path / "run.yaml", "--resume", says=f"{run / 'dcp'} is damaged")
    assert "loads no code" not in line and f"restore {run / 'dcp'} from a copy" in line, line


# ---- model folders -----------------------------------------------------------------------------------------


CODE = "open({mark!r}, 'w')\n"
LLAMA = {"model_type": "llama", "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1}


def model_folder(path, raw_tokenizer_files: bool = True, **config_extra):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**LLAMA, **config_extra}))
    if raw_tokenizer_files:  # present, as a vocabulary and its settings: the checks under test come before reading
        (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
        (path / "tokenizer.json").write_text("{}")
    return path


@pytest.mark.parametrize("file,asks", [("config.json", "model_type 'evil'"),
                                       ("tokenizer_config.json", "tokenizer_class 'Evil'")])
def test_import_hf_refuses_a_folder_that_asks_to_run_its_code(tmp_path, file, asks, monkeypatch, capsys):
    mark = tmp_path / "MARK"
    folder = model_folder(tmp_path / "model")
    (folder / "evil.py").write_text(CODE.format(mark=str(mark)))
    asked = json.loads((folder / file).read_text())
    asked.update(auto_map={"AutoConfig": "evil.EvilConfig", "AutoTokenizer": ["evil.Evil", "evil.Evil"]},
                 **({"model_type": "evil"} if file == "config.json" else {"tokenizer_class": "Evil"}))
    (folder / file).write_text(json.dumps(asked))
    monkeypatch.setattr("builtins.input", lambda *a: "y")  # were anything asked, the answer would be yes
    refused(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out",
            says=f"{folder / file} asks for {asks}, which only Python code in {folder} provides")
    assert not mark.exists() and not (tmp_path / "out").exists()


def test_an_auto_map_beside_built_in_classes_runs_nothing(tmp_path, monkeypatch, capsys):
    """EuroBERT's original folders name their own code in auto_map for a model type transformers has: transformers
    builds its own classes (trust_remote_code=False), and the import goes on (here, to the missing weights)."""
    mark = tmp_path / "MARK"
    folder = model_folder(tmp_path / "model", auto_map={"AutoConfig": "evil.EvilConfig"})
    (folder / "evil.py").write_text(CODE.format(mark=str(mark)))
    monkeypatch.setattr("builtins.input", lambda *a: "y")
    refused(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out", says="has config.json but no weights")
    assert not mark.exists()


def test_export_of_a_checkpoint_without_manifest_refuses_tokenizer_code(tmp_path, bpe_checkpoint, monkeypatch,
                                                                        capsys):
    mark = tmp_path / "MARK"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(bpe_checkpoint, ckpt)
    (ckpt / checkpoint.MANIFEST).unlink()  # as written before checksums existed: accepted unverified
    state = json.loads((ckpt / "state.json").read_text())
    state.pop("manifest"), state.pop("format_version")
    (ckpt / "state.json").write_text(json.dumps(state))
    tok = ckpt / "tokenizer"
    (tok / "tokenizer.json").unlink()
    (tok / "evil.py").write_text(CODE.format(mark=str(mark)))
    (tok / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.Evil", None]},
                                                           "tokenizer_class": "Evil"}))
    refused(monkeypatch, capsys, "export", ckpt, "--out", tmp_path / "out",
            says=f"{tok / 'tokenizer_config.json'} asks for tokenizer_class 'Evil'")
    assert not mark.exists() and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory, synthetic):
    from encoderlab.data.tokenizer import train_bpe
    from encoderlab.model.config import ModelConfig
    from encoderlab.model.transformer import TransformerLM

    tok = train_bpe((d.text for d in synthetic(60)), 300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
                      pad_token_id=tok.pad_id, mask_token_id=tok.mask_id)
    path = tmp_path_factory.mktemp("weights") / "ckpt"
    state = {"step": 1, "reason": "final", "objective": "mlm40", "schedule": "mlm40", "total_steps": 1}
    return checkpoint.save_weights_only(path, TransformerLM(cfg).state_dict(), cfg, tok, state)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../outside.safetensors"])
def test_a_weight_index_names_only_files_in_its_folder(tmp_path, shard, monkeypatch, capsys):
    from safetensors.torch import save_file

    folder = model_folder(tmp_path / "model")
    save_file({"model.embed_tokens.weight": torch.zeros(32, 8)}, str(tmp_path / "outside.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": shard}}))
    refused(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out",
            says=f"names the shard '{shard}', which is outside {folder}")


def test_a_pickle_in_pytorch_model_bin_is_named_and_never_runs(tmp_path, monkeypatch, capsys):
    mark = tmp_path / "MARK"
    folder = model_folder(tmp_path / "model")
    torch.save({"model.embed_tokens.weight": torch.zeros(32, 8), "extra": Payload(mark)},
               folder / "pytorch_model.bin")
    line = refused(monkeypatch, capsys, "import-hf", folder, "--out", tmp_path / "out",
                   says=f"{folder / 'pytorch_model.bin'} is a pickle that encoderlab will not load")
    assert "convert it to safetensors" in line and "asking for io.open" in line
    assert "weights_only=False" not in line and "damaged" not in line
    assert not mark.exists()


@pytest.mark.parametrize("length", [1 << 60, 100])
def test_a_gguf_whose_string_runs_past_its_end_is_one_line(tmp_path, length, monkeypatch, capsys):
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    key = b"general.architecture"
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + struct.pack("<Q", len(key)) + key
    (tmp_path / "m.gguf").write_bytes(header + struct.pack("<IQ", 8, length) + b"llama")
    refused(monkeypatch, capsys, "import-hf", tmp_path / "m.gguf", "--out", tmp_path / "out",
            says=f"{tmp_path / 'm.gguf'} is not a GGUF file encoderlab can read: a string ({length} bytes")
