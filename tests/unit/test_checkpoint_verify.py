"""Verified checkpoints: every file of a checkpoint damaged, cut short or deleted is refused in one line naming it
(and the older complete checkpoint of the run) at resume and, for what they read, at load_model."""
from __future__ import annotations

import json
import shutil

import pytest
from test_train import make_config, weights, written_before_manifests

from encoderlab.core.errors import EncoderlabError
from encoderlab.pretraining.loop import Trainer
from encoderlab.runs import checkpoint


@pytest.fixture(scope="module")
def written_run(tmp_path_factory, packed_dir):
    """A run stopped after step 4 of 6: step-0000002, step-0000003 (stable, before the decay), step-0000004 (LATEST)."""
    out = tmp_path_factory.mktemp("verified")
    Trainer(make_config(out, packed_dir, steps=6, save_every=2), show_progress=False).run(stop_at=4)
    return out / "run"


@pytest.fixture
def run(written_run, tmp_path):
    shutil.copytree(written_run, tmp_path / "run")
    return tmp_path / "run"


def resume(run, packed_dir):
    return Trainer(make_config(run.parent, packed_dir, steps=6, save_every=2), show_progress=False, resume=True)


def damage(file, how):
    data = file.read_bytes()
    if how == "flip":
        start = len(data) // 2 - min(32, len(data) // 4)
        data = data[:start] + bytes(b ^ 0xFF for b in data[start:start + 64]) + data[start + 64:]
        file.write_bytes(data)
    elif how == "truncate":
        file.write_bytes(data[:len(data) // 2])
    else:
        file.unlink()


def dcp_file(folder):
    return next(p for p in sorted((folder / "dcp").iterdir()) if p.name != ".metadata").relative_to(folder)


def test_the_manifest_lists_every_file_with_size_and_sha256(run):
    from encoderlab.core.io import sha256_of

    folder = run / "checkpoints" / "step-0000004"
    files = json.loads((folder / checkpoint.MANIFEST).read_text())["files"]
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {checkpoint.MANIFEST}
    assert set(files) == on_disk and {"dcp/.metadata", "model.safetensors", "state.json"} <= on_disk
    assert all(files[r] == {"size": (folder / r).stat().st_size, "sha256": sha256_of(folder / r)} for r in files)


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("name", ["model.safetensors", "dcp", "dcp/.metadata", "state.json", "model_config.json",
                                  "tokenizer/tokenizer.json", checkpoint.MANIFEST])
def test_a_damaged_file_is_refused_at_resume_naming_it_and_the_older_checkpoint(run, packed_dir, name, how):
    folder = run / "checkpoints" / "step-0000004"
    rel = dcp_file(folder) if name == "dcp" else name
    if name == checkpoint.MANIFEST and how == "flip":
        how = "truncate"  # flipped bytes in JSON text may still parse: cut short, it cannot
    damage(folder / rel, how)
    with pytest.raises(EncoderlabError) as refused:
        resume(run, packed_dir)
    message = str(refused.value)
    named = "step-0000004, which is missing or incomplete (no state.json)" if (name, how) == ("state.json", "delete") \
        else f"checkpoint file {folder / rel} "
    assert named in message and "\n" not in message
    assert f"{run / 'checkpoints' / 'step-0000003'} is an older complete checkpoint" in message
    assert f"write step-0000003 into {run / 'LATEST'}" in message
    what = {"flip": "does not match its SHA-256", "truncate": "bytes, checksums.json records", "delete": "missing"}
    if name != checkpoint.MANIFEST:
        assert what[how] in message


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("name", ["model.safetensors", "model_config.json", "tokenizer/tokenizer.json"])
def test_load_model_refuses_what_it_reads_and_ignores_the_optimizer_state(run, name, how):
    folder = run / "checkpoints" / "step-0000004"
    damage(folder / dcp_file(folder), "flip")  # not read by load_model: not hashed, not refused
    checkpoint.load_model(folder)
    damage(folder / name, how)
    with pytest.raises(EncoderlabError, match=f"checkpoint file {folder / name} .*step-0000003 is an older complete"):
        checkpoint.load_model(run)


def test_the_hint_names_only_a_complete_older_checkpoint(run, packed_dir):
    damage(run / "checkpoints" / "step-0000004" / "model.safetensors", "flip")
    damage(run / "checkpoints" / "step-0000003" / "model.safetensors", "truncate")
    with pytest.raises(EncoderlabError, match=r"does not match .*step-0000002 is an older complete checkpoint"):
        resume(run, packed_dir)
    damage(run / "checkpoints" / "step-0000002" / "dcp" / ".metadata", "delete")
    with pytest.raises(EncoderlabError) as refused:
        resume(run, packed_dir)
    assert "model.safetensors does not match" in str(refused.value) and "older" not in str(refused.value)


def test_weights_only_checkpoints_are_verified(run, tmp_path):
    trainer_free = checkpoint.load_model(run)
    model, cfg, _ = trainer_free
    dest = checkpoint.save_weights_only(tmp_path / "import", model.state_dict(), cfg,
                                        run / "checkpoints" / "step-0000004" / "tokenizer", {"reason": "imported"})
    assert (dest / checkpoint.MANIFEST).exists()
    checkpoint.load_model(dest)
    damage(dest / "model.safetensors", "flip")
    with pytest.raises(EncoderlabError, match=r"import/model.safetensors does not match its SHA-256 in checksums\.json"
                                              r": its bytes are damaged$"):
        checkpoint.load_model(dest)


def test_a_checkpoint_written_before_manifests_loads_unverified(run, packed_dir):
    written_before_manifests(run / "checkpoints" / "step-0000004")
    resumed = resume(run, packed_dir)
    assert resumed.step == 4
    resumed.run()
    assert weights(run, 6).keys() == checkpoint.load_model(run)[0].state_dict().keys()


@pytest.mark.parametrize("left", [{}, "all but the weights"])
def test_a_manifest_cut_short_is_refused_not_trusted(run, left):
    ckpt = run / "checkpoints" / "step-0000004"
    listed = json.loads((ckpt / checkpoint.MANIFEST).read_text())["files"]
    kept = {} if left == {} else {k: v for k, v in listed.items() if k != checkpoint.WEIGHTS}
    (ckpt / checkpoint.MANIFEST).write_text(json.dumps({"files": kept}))
    first = "model_config.json" if left == {} else checkpoint.WEIGHTS  # the first file load_model verifies
    with pytest.raises(EncoderlabError, match=rf"{first} is not in checksums\.json.*manifest is damaged; "
                                              r".*step-0000003 is an older complete checkpoint"):
        checkpoint.load_model(ckpt)


@pytest.mark.parametrize("outside", ["../../config.yaml", "/etc/hostname", "tokenizer/../../../x"])
def test_a_manifest_naming_a_file_outside_the_checkpoint_is_refused(run, outside):
    """Its writer lists files below the checkpoint only: a `..` or an absolute path would have the checks hash and
    compare a file elsewhere (the manifest is the checkpoint's, a user's file names it)."""
    ckpt = run / "checkpoints" / "step-0000004"
    listed = json.loads((ckpt / checkpoint.MANIFEST).read_text())["files"]
    (ckpt / checkpoint.MANIFEST).write_text(json.dumps({"files": {**listed, outside: {"size": 1, "sha256": "0"}}}))
    with pytest.raises(EncoderlabError, match=r"checksums\.json is damaged"):
        checkpoint.load_model(ckpt)


def test_a_file_beside_the_checkpoints_own_is_left_alone(run):
    ckpt = run / "checkpoints" / "step-0000004"
    (ckpt / ".DS_Store").write_bytes(b"\0")  # a desktop's, or an export written into a subfolder
    (ckpt / "tokenizer" / "._tokenizer.json").write_bytes(b"\0")
    (ckpt / "hf").mkdir()
    (ckpt / "hf" / "config.json").write_text("{}")
    checkpoint.verify(ckpt)
    checkpoint.load_model(ckpt)


def test_a_weight_that_is_not_finite_is_refused_whatever_the_checksums_say(run, packed_dir):
    """A NaN in the weights with the manifest redone (as anyone sending the checkpoint can): refused in one line
    naming the tensor, by fine-tuning's load_model and by resume, before any step."""
    from safetensors.torch import load_file, save_file

    folder = run / "checkpoints" / "step-0000004"
    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[-1]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    checkpoint.write_manifest(folder)
    with pytest.raises(EncoderlabError, match=f"{folder}: weight {name} is not finite"):
        checkpoint.load_model(run)
    with pytest.raises(EncoderlabError, match=f"weight {name} is not finite"):
        resume(run, packed_dir)
