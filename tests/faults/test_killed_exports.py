"""A kill during `export` or `import-hf` leaves a full-size temporary folder beside `--out`: the next run (of any
writer of that folder) removes it, and never one whose writer still runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import train_tiny

from encoderlab.core.io import atomic_dir
from encoderlab.core.leftovers import remove_dead_leftovers
from encoderlab.hub.exporter import export_checkpoint
from encoderlab.hub.importer import import_hf

# Dies by SIGKILL (no cleanup runs) inside the writer's temporary folder, once the weights are written there.
CHILD = """
import os, signal, sys
from pathlib import Path
from encoderlab.hub import exporter
from encoderlab.hub.importer import import_hf
from encoderlab.runs import checkpoint

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[1] == "export":
    exporter.compatible_config = die
    exporter.export_checkpoint(Path(sys.argv[2]), Path(sys.argv[3]), "llama", attention="causal")
else:
    checkpoint.write_manifest = die
    import_hf(sys.argv[2], Path(sys.argv[3]))
"""


def killed(*args: str) -> None:
    child = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr


def leftovers(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*"))


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_export_or_imports_copy_is_removed_by_the_next(tmp_path, packed_dir, one_thread):
    ckpt = train_tiny(tmp_path, packed_dir) / "checkpoints" / "step-0000002"
    killed("export", str(ckpt), str(tmp_path / "hf"))
    (left,) = leftovers(tmp_path / "hf")
    assert (left / "model.safetensors").stat().st_size > 100_000 and not (tmp_path / "hf").exists()
    export_checkpoint(ckpt, tmp_path / "hf", "llama", attention="causal")
    assert leftovers(tmp_path / "hf") == [] and (tmp_path / "hf" / "model.safetensors").is_file()

    killed("import", str(tmp_path / "hf"), str(tmp_path / "imported"))
    (left,) = leftovers(tmp_path / "imported")
    assert (left / "model.safetensors").is_file() and not (tmp_path / "imported").exists()
    import_hf(str(tmp_path / "hf"), tmp_path / "imported")
    assert leftovers(tmp_path / "imported") == [] and (tmp_path / "imported" / "checksums.json").is_file()


def test_a_live_writers_folder_is_kept_and_a_previous_version_is_put_back(tmp_path):
    dest, pid = tmp_path / "out", dead_pid()
    live = tmp_path / f".out.tmp-{os.getpid()}-abcd1234"  # this process: a writer that still runs
    live.mkdir()
    old = tmp_path / f".out.old-{pid}"  # killed between its two renames: `out` moved aside, the new one not in
    old.mkdir()
    (old / "keep.txt").write_text("previous")
    (tmp_path / f".out.tmp-{pid}-00ff00ff").mkdir()
    assert remove_dead_leftovers(dest) == [old.name, f".out.tmp-{pid}-00ff00ff"]
    assert (dest / "keep.txt").read_text() == "previous" and leftovers(dest) == [live]
    live.rmdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "kept.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with atomic_dir(tmp_path / "link") as tmp:  # a link is replaced by the folder; what it led to stays
        (tmp / "new.txt").write_text("y")
    assert (tmp_path / "link" / "new.txt").is_file() and not (tmp_path / "link").is_symlink()
    assert (tmp_path / "real" / "kept.txt").is_file() and leftovers(tmp_path / "link") == []
