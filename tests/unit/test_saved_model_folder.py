"""Where `finetune --save` / `sweep --models` may keep fine-tuned models (hub/finetuned.py `SavedModels`): never
among a run's or checkpoint's files (as `export --out`), nor inside the model folder being fine-tuned, refused
before any work in one line."""
from __future__ import annotations

import pytest

from encoderlab.core.errors import EncoderlabError
from encoderlab.hub.finetuned import SavedModels


@pytest.fixture
def run(tmp_path):
    """A run folder with one checkpoint, as pretraining lays them out (LATEST, checkpoints/step-N/)."""
    ckpt = tmp_path / "run" / "checkpoints" / "step-0000003"
    ckpt.mkdir(parents=True)
    for name in ("model.safetensors", "state.json"):
        (ckpt / name).write_text("x")
    (tmp_path / "run" / "LATEST").write_text("step-0000003\n")
    return tmp_path / "run"


@pytest.mark.parametrize(("where", "exact", "message"), [
    ("run/checkpoints/step-0000003/kept", True, "--save {t}/run/checkpoints/step-0000003/kept lies inside "
                                               "{t}/run/checkpoints/step-0000003, a checkpoint of the run"),
    ("run/kept", True, "--save {t}/run/kept lies inside {t}/run, a run folder"),
    ("run/checkpoints/step-0000003", True, "--save {t}/run/checkpoints/step-0000003 is a checkpoint of the run"),
    ("run", True, "--save {t}/run is a run folder"),
    ("run/models", False, "--models {t}/run/models lies inside {t}/run, a run folder"),
])
def test_a_save_folder_among_a_run_or_checkpoint_files_is_refused(tmp_path, run, where, exact, message):
    with pytest.raises(EncoderlabError) as e:
        SavedModels("all", tmp_path / where, run / "checkpoints" / "step-0000003", exact=exact)
    assert str(e.value).startswith(message.format(t=tmp_path)) and "\n" not in str(e.value)
    assert not (tmp_path / where).exists() or where in ("run", "run/checkpoints/step-0000003")


def test_a_save_folder_inside_the_model_folder_fine_tuned_is_refused(tmp_path):
    model = tmp_path / "bert"  # a transformers folder fine-tuned as it is: its files decide the records' identity
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(EncoderlabError, match=f"--save {model}/kept lies inside {model}, the model folder being "
                                              "fine-tuned"):
        SavedModels("all", model / "kept", model, exact=True)


def test_a_new_folder_beside_the_run_is_taken(tmp_path, run):
    """The refusals above do not over-reach: a folder of its own, beside the run, is accepted."""
    saver = SavedModels("all", tmp_path / "kept", run / "checkpoints" / "step-0000003", exact=True)
    assert saver.root == tmp_path / "kept"
