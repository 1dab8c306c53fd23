"""Helpers of the `sweep` and `finetune` commands (cli/commands.py): their options' values and the keeper that
saves fine-tuned models (`--save`, `--save-models`; hub/finetuned.py)."""
from __future__ import annotations

from pathlib import Path

from encoderlab.cli.console import log
from encoderlab.core.errors import EncoderlabError

SAVE_HELP = ("Save the fine-tuned model in this folder: stock transformers classes (or sentence-transformers, for "
             "retrieval) load it, with a card of its scores (docs/hf.md).")
SAVE_MODELS_HELP = ("none | chosen | all: save fine-tuned models under --models: each seed's run at the LR the "
                    "protocol chooses (trained again after the sweep, sequentially), or every run (each trained "
                    "sequentially).")


def keeper(mode: str, folder: Path | None, checkpoint: Path, *, exact: bool = False):
    """The `ModelSaver` of `--save` (exact: one run's folder) or `--save-models MODE --models FOLDER`; None: nothing."""
    from encoderlab.hub.finetuned import keeper as saver

    return saver(mode, folder, checkpoint, exact=exact, log=log)


def workers_option(value: str) -> int | str:
    if value == "auto":
        return value
    if not value.isdigit() or int(value) < 1:
        raise EncoderlabError(f"--workers {value!r}: give 'auto' or a whole number, 1 or more")
    return int(value)

