"""An empty path names nothing: Path('') is Path('.'), so `load('')` read the current folder and `data prepare
offline --out ''` wrote into it. Every path argument of the Python API and of the command line refuses an empty or
blank one before any work, in one line naming the argument."""
from __future__ import annotations

from pathlib import Path

import pytest

import encoderlab
from encoderlab.core.errors import EncoderlabError

from conftest import run_command

WHY = "path names no file or folder (give '.' for the current folder)"


@pytest.mark.parametrize(("call", "says"), [
    (lambda: encoderlab.load(""), "load: argument checkpoint='': an empty"),
    (lambda: encoderlab.load("  "), "load: argument checkpoint='  ': a blank"),
    (lambda: encoderlab.load(Path(" ")), "load: argument checkpoint=' ': a blank"),
    (lambda: encoderlab.pretrain(""), "pretrain: argument config='': an empty"),
    (lambda: encoderlab.sweep("", ["sst2"]), "sweep: argument checkpoint='': an empty"),
    (lambda: encoderlab.sweep("ckpt", ["sst2", ""]), "sweep: argument tasks[1]='': an empty"),
    (lambda: encoderlab.sweep("ckpt", " "), "sweep: argument tasks=' ': a blank"),
    (lambda: encoderlab.sweep("ckpt", "sst2", out=""), "sweep: argument out='': an empty"),
    (lambda: encoderlab.sweep("ckpt", "sst2", protocol=""), "sweep: argument protocol='': an empty"),
    (lambda: encoderlab.sweep("ckpt", "sst2", models=""), "sweep: argument models='': an empty"),
    (lambda: encoderlab.finetune("ckpt", "", lr=1e-3), "finetune: argument task='': an empty"),
    (lambda: encoderlab.finetune("ckpt", "sst2", lr=1e-3, save=""), "finetune: argument save='': an empty"),
    (lambda: encoderlab.run_study(""), "run_study: argument study='': an empty"),
    (lambda: encoderlab.report_study(""), "report_study: argument folder='': an empty"),
    (lambda: encoderlab.report_study("s", reference=""), "report_study: argument reference='': an empty"),
    (lambda: encoderlab.export("ckpt", ""), "export: argument out='': an empty"),
    (lambda: encoderlab.export("ckpt", "out", evaluation=""), "export: argument evaluation='': an empty"),
    (lambda: encoderlab.import_hf("", "out"), "import_hf: argument source='': an empty"),
    (lambda: encoderlab.mteb("", "tiny-ir", "out"), "mteb: argument model='': an empty"),
    (lambda: encoderlab.mteb("ckpt", "tiny-ir", "\t"), "mteb: argument out='\\t': a blank"),
    (lambda: encoderlab.prepare_data(""), "prepare_data: argument source='': an empty"),
    (lambda: encoderlab.prepare_data("offline", ""), "prepare_data: argument out='': an empty"),
    (lambda: encoderlab.prepare_data("offline", "d", tokenizer=""), "prepare_data: argument tokenizer='': an empty"),
])
def test_the_api_refuses_an_empty_path_naming_its_argument(tmp_path, monkeypatch, call, says):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EncoderlabError) as caught:
        call()
    assert str(caught.value) == f"{says} {WHY}"
    assert list(tmp_path.iterdir()) == []  # refused before any work: nothing read or written here


@pytest.mark.parametrize(("args", "says"), [
    (["export", "", "--out", "x"], "encoderlab export: CHECKPOINT '': an empty"),
    (["export", "ckpt", "--out", ""], "encoderlab export: --out '': an empty"),
    (["export", "ckpt", "--out", "x", "--eval", " "], "encoderlab export: --eval ' ': a blank"),
    (["pretrain", ""], "encoderlab pretrain: CONFIG '': an empty"),
    (["sweep", "", "sst2"], "encoderlab sweep: CHECKPOINT '': an empty"),
    (["sweep", "ckpt", "sst2", ""], "encoderlab sweep: TASKS '': an empty"),
    (["sweep", "ckpt", "sst2", "--protocol", ""], "encoderlab sweep: --protocol '': an empty"),
    (["sweep", "ckpt", "sst2", "--out", ""], "encoderlab sweep: --out '': an empty"),
    (["sweep", "ckpt", "sst2", "--models", "  "], "encoderlab sweep: --models '  ': a blank"),
    (["finetune", "ckpt", "", "--lr", "1e-3"], "encoderlab finetune: TASK '': an empty"),
    (["finetune", "ckpt", "sst2", "--lr", "1e-3", "--save", ""], "encoderlab finetune: --save '': an empty"),
    (["import-hf", "", "--out", "x"], "encoderlab import-hf: SOURCE '': an empty"),
    (["import-hf", "smollm2", "--out", ""], "encoderlab import-hf: --out '': an empty"),
    (["mteb", "", "--tasks", "tiny-ir", "--out", "x"], "encoderlab mteb: MODEL '': an empty"),
    (["mteb", "ckpt", "--tasks", "tiny-ir", "--out", ""], "encoderlab mteb: --out '': an empty"),
    (["data", "prepare", ""], "encoderlab data prepare: SOURCE '': an empty"),
    (["data", "prepare", "offline", "--out", ""], "encoderlab data prepare: --out '': an empty"),
    (["data", "prepare", "offline", "--tokenizer", ""], "encoderlab data prepare: --tokenizer '': an empty"),
    (["data", "inspect", ""], "encoderlab data inspect: PACKED '': an empty"),
    (["study", "plan", ""], "encoderlab study plan: STUDY '': an empty"),
    (["study", "run", ""], "encoderlab study run: STUDY '': an empty"),
    (["study", "report", ""], "encoderlab study report: FOLDER '': an empty"),
    (["study", "report", "s", "--reference", ""], "encoderlab study report: --reference '': an empty"),
    (["demo", "--study", ""], "encoderlab demo: --study '': an empty"),
])
def test_the_command_line_refuses_an_empty_path_naming_its_argument(tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_command(monkeypatch, capsys, *args, home=tmp_path / "home")
    assert (code, out, err) == (2, "", f"error: {says} {WHY}\n")
    assert list(tmp_path.iterdir()) == []


def test_every_path_parameter_of_the_command_line_is_checked():
    """A command added later with a path parameter is checked too: the check is put on each path parameter of every
    registered command (cli/paths.py), not written into each command."""
    import inspect

    from encoderlab.cli import app
    from encoderlab.cli.paths import PATH_ANNOTATION

    def commands(typer_app):
        yield from typer_app.registered_commands
        for group in typer_app.registered_groups:
            yield from commands(group.typer_instance)

    found = [(info.callback.__name__, param.name, param.default.parser)
             for info in commands(app) for param in inspect.signature(info.callback).parameters.values()
             if PATH_ANNOTATION.search(str(param.annotation))]
    assert len(found) >= 24 and all(parser is not None for *_, parser in found), found


PRETRAIN = Path(encoderlab.__file__).parent / "configs" / "pretrain" / "demo-tiny.yaml"  # its own paths are good


@pytest.mark.parametrize("key", ["data.path", "out_dir", "init.from_weights", "init.branch_from"])
@pytest.mark.parametrize("value", ["''", "' '"])
def test_an_override_that_empties_a_path_is_refused_naming_it(tmp_path, monkeypatch, capsys, key, value):
    """`--set data.path=''` read the current folder as the packed data (its hint said `--out ` and nothing after),
    `--set out_dir=''` put the run folder here, `--set init.from_weights=''` was taken for not set: each path of a
    config is refused as an empty path argument is, blamed on the override that gave it."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_command(monkeypatch, capsys, "pretrain", PRETRAIN, "--set", f"{key}={value}",
                                 home=tmp_path / "home")
    kind = "an empty" if value == "''" else "a blank"
    assert (code, out) == (2, "")
    assert err.startswith(f"error: --set {key}={value}: {key}: {kind} {WHY}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_config_file_with_an_empty_path_is_refused_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text("train: {steps: 10, global_batch: 2}\nlr_schedule: {warmup_steps: 1, decay_steps: 1}\n"
                      "init: {from_weights: ''}\n")
    code, out, err = run_command(monkeypatch, capsys, "pretrain", config, home=tmp_path / "home")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {config}: init.from_weights: an empty {WHY}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == [config]


@pytest.mark.parametrize(("entry", "key"), [
    ("out_dir: ''", "out_dir"),
    ("paper_results: ' '", "paper_results"),
    ("checkpoints: {mine: ''}", "checkpoints.mine"),
    ("imported: {dec: ''}", "imported.dec.source"),
    ("evaluation: {protocol: '', tasks: [offline]}", "evaluation.protocol"),
])
def test_a_study_file_with_an_empty_path_is_refused_naming_the_key(tmp_path, monkeypatch, capsys, entry, key):
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "study.yaml"
    lines = {"name": "s", "checkpoints": "{base: ckpt}", "evaluation": "{protocol: demo, tasks: [offline]}"}
    lines[entry.partition(":")[0]] = entry.partition(": ")[2]
    if "imported" in lines:
        lines |= {"pretrain": str(PRETRAIN), "budget": "10"}
    study.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    code, out, err = run_command(monkeypatch, capsys, "study", "plan", study, home=tmp_path / "home")
    assert (code, out) == (2, "")
    assert f": {key}: a" in err and WHY in err and err.count("\n") == 1, err
    assert err.startswith(f"error: {study}: "), err
    assert list(tmp_path.iterdir()) == [study]


@pytest.mark.parametrize(("family", "files"), [
    ("retrieval", "folder: ''"),
    ("classification", "train: train.csv\nvalidation: ''"),
])
def test_a_task_file_with_an_empty_path_is_refused_naming_the_key(tmp_path, family, files):
    """An empty `folder:` was the task file's own folder, which exists: the task read whatever lay beside it."""
    from encoderlab.tasks.taskfile import read_task_file

    (tmp_path / "train.csv").write_text("text,label\na,0\n")
    task = tmp_path / "mine.yaml"
    task.write_text(f"family: {family}\n{files}\n")
    key = files.splitlines()[-1].partition(":")[0]
    with pytest.raises(EncoderlabError) as caught:
        read_task_file(task)
    assert str(caught.value).startswith(f"task file {task}: {key}: an empty {WHY}"), caught.value
