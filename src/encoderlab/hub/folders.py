"""What import (importer.py), export (exporter.py) and data preparation share: output folders that must not be written
into, and the unsupported-model error."""
from __future__ import annotations

import os
from pathlib import Path

from encoderlab.core.errors import EncoderlabError, option, option_name
from encoderlab.core.io import check_writable
from encoderlab.runs.checkpoint import LATEST, WEIGHTS


class UnsupportedModelError(EncoderlabError):
    """A model whose architecture encoderlab cannot represent exactly."""


def never_written_into(out: Path, imports: bool = False) -> str | None:
    """What `out` is when it is a folder no import, export or data preparation may write into: a run folder, a
    checkpoint (`imports`: except an earlier import standing alone, which a new import of a source replaces)."""
    if (out / "checkpoints").is_dir() or (out / LATEST).exists():
        return "a run folder (it holds checkpoints/)"
    if not ((out / WEIGHTS).is_file() and (out / "state.json").is_file()):
        return None
    if out.resolve().parent.name == "checkpoints":
        return f"a checkpoint of the run {out.resolve().parent.parent}"
    if imports and (out / "import.json").is_file():
        return None
    return f"an encoderlab checkpoint (it holds {WEIGHTS} and state.json)"


def prepared_data(out: Path) -> str | None:
    """What `out` is when `data prepare` made it, and what reads it: a prepared dataset (corpus/, packed/), its packed
    shards, a sharded preparation (parts/, before or after `--join`) or its parts (hours of tokenising each)."""
    if (out / "packed" / "meta.json").is_file() or (out / "corpus" / "manifest.json").is_file():
        return "a prepared dataset (it holds packed/ or corpus/): runs read it (and resume from it)"
    if (out / "meta.json").is_file() and any(out.glob("*.tokens.bin")):
        return "a prepared dataset's packed shards (meta.json, *.tokens.bin): runs read it (and resume from it)"
    if _sharded_parts(out / "parts"):
        return ("a sharded preparation (it holds parts/): `--join` packs its tokenised parts and `--shard` resumes "
                "from them")
    if _sharded_parts(out):
        return ("a sharded preparation's parts (part-*, shard-*-of-*.json): `--join` packs them and `--shard` "
                "resumes from them")
    return None


def _sharded_parts(folder: Path) -> bool:
    """Whether `folder` holds what `data prepare --shard` writes (data/shards.py: `part-UUUUUU.*` and the shards'
    `shard-I-of-N.json`), a part whole or half-written."""
    return folder.is_dir() and any(p.name.startswith("part-") or (p.name.startswith("shard-") and
                                                                  p.name.endswith(".json")) for p in folder.iterdir())


def enclosing(out: Path) -> Path | None:
    """The run folder (it holds LATEST) or checkpoint that `out` lies inside, if any."""
    for above in Path(os.path.abspath(out)).parents:
        if (above / LATEST).is_file() or ((above / WEIGHTS).is_file() and (above / "state.json").is_file()):
            return above
    return None


def refuse_run_files(out: Path, named: str, instead: str) -> None:
    """Refuse an output folder that is a run folder or checkpoint, or lies inside one (a folder above it holds
    LATEST, or is a checkpoint): what it writes would go among the run's files, which their readers do not expect."""
    if out.is_dir() and (kind := never_written_into(out)):
        raise EncoderlabError(f"{named} is {kind}: {instead}")
    if above := enclosing(out):
        raise EncoderlabError(f"{named} lies inside {above}, {never_written_into(above)}: {instead}")


def check_data_out(out: Path, what: str) -> None:
    """Refuse a `data prepare` output among a run's files: its corpus/ and packed/ would go there."""
    refuse_run_files(out, f"{what} {out}", "prepared data goes in a folder of its own")


def prepare_out(out: Path, force: bool, keep: Path, *, imports: bool = False) -> None:
    """Refuse, before any work, a folder that cannot be written or would replace what it should not: a non-empty
    one unless asked (the output is written whole beside it, then renamed over it), never one holding `keep`, the
    input, nor a run folder or checkpoint (`never_written_into`) or a folder inside one, nor a symbolic link (the
    rename would replace the link, not fill the folder it leads to)."""
    named = option("out", out)
    check_writable(out, option_name("out"), replaced=True)
    if out.is_symlink() and out.exists():
        raise EncoderlabError(f"{named} is a symbolic link (to {os.readlink(out)}): give the folder it leads to, "
                              "or a new folder")
    if keep.resolve().is_relative_to(out.resolve()):
        raise EncoderlabError(f"{named} holds the input {keep}: writing there would replace it")
    if above := enclosing(out):  # a folder among a run's or checkpoint's files, which its readers do not expect
        raise EncoderlabError(f"{named} lies inside {above}, {never_written_into(above)}: give a folder of its own")
    if out.is_dir() and (what := never_written_into(out, imports)):
        raise EncoderlabError(f"{named} is {what}: it is never replaced, even with {option('force')}; give another "
                              "folder")
    if out.is_dir() and (what := prepared_data(out)):
        raise EncoderlabError(f"{named} is {what}, so it is never replaced, even with {option('force')}; give "
                              "another folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise EncoderlabError(f"{named} exists and is not empty: pass {option('force')} to replace it")
