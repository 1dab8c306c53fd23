"""The identity of a task: what its records are kept by (its name and a fingerprint of definition and data)."""
from __future__ import annotations

from pathlib import Path

from encoderlab.finetuning import records
from encoderlab.tasks import task_identity

FILES = "family: classification\ntrain: train.csv\nvalidation: train.csv\n"


def folder(path, yaml=FILES, csv="text,label\na,pos\nb,neg\n"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "task.yaml").write_text(yaml)
    (path / "train.csv").write_text(csv)
    return str(path / "task.yaml")


def test_the_fingerprint_follows_definition_and_content_not_place(tmp_path):
    name, first = task_identity(folder(tmp_path / "a"))
    assert name == "task" and len(first) == 16  # the YAML's stem, not its data folder's name
    assert task_identity(folder(tmp_path / "b"))[1] == first  # the same content elsewhere
    assert task_identity(folder(tmp_path / "c", FILES + "name: bbc\n")) == ("bbc", first)
    assert task_identity(folder(tmp_path / "d", FILES + "label_column: text\n"))[1] != first
    assert task_identity(folder(tmp_path / "e", FILES.replace("validation: train.csv", "validation: train.csv\n"
                                                              "test: train.csv")))[1] != first
    assert task_identity(folder(tmp_path / "f", csv="text,label\na,pos\nb,pos\n"))[1] != first


def test_labels_read_otherwise_than_their_records_were_made_give_another_fingerprint(tmp_path):
    """A CSV's "1.0" and "+1" were first read as classes beside "1": records of such files were made on other
    classes and are not reused; a file whose every label reads as before keeps its fingerprint and its records."""
    from encoderlab.core.io import file_digest
    from encoderlab.tasks.taskfile import FILE_KEYS, fingerprint, read_task_file

    def before(spec):  # the fingerprint as it was computed before the labels' reading entered it
        file = read_task_file(Path(spec))
        settings = file.settings.model_dump(exclude={"name", *FILE_KEYS})
        return fingerprint({"task file": settings, "files": {r: file_digest(p) for r, p in file.files.items()}})

    same = folder(tmp_path / "same", csv="text,label\na,1\nb,0\nc, 2 \n")
    assert task_identity(same)[1] == before(same)
    for i, labels in enumerate((("1", "1.0"), ("+1", "-1"), ("0.0", "1.0"))):
        spec = folder(tmp_path / f"read{i}", csv="text,label\n" + "".join(f"t{j},{y}\n" for j, y in enumerate(labels)))
        assert task_identity(spec)[1] != before(spec), labels


def test_labels_read_otherwise_since_the_second_reading_give_another_fingerprint_again(tmp_path):
    """The second reading made "1.0" and "+1" the class 1 and marked such files `{"labels": 2}`; the third makes "1e2"
    the class 100 and "True" the class true. A file each of whose labels reads as under the first or the second
    reading keeps the fingerprint it had; one with a label read otherwise now gets another one."""
    from encoderlab.core.io import file_digest
    from encoderlab.tasks.taskfile import FILE_KEYS, fingerprint, read_task_file

    def under(spec, reading):  # the fingerprint as computed under an earlier reading of the labels
        file = read_task_file(Path(spec))
        settings = file.settings.model_dump(exclude={"name", *FILE_KEYS})
        files = {r: file_digest(p) for r, p in file.files.items()}
        return fingerprint({"task file": settings, "files": files, **reading})

    def spec(name, labels):
        return folder(tmp_path / name, csv="text,label\n" + "".join(f"t{j},{y}\n" for j, y in enumerate(labels)))

    first, second = spec("first", ["1", "0"]), spec("second", ["1.0", "+1", "0"])
    assert task_identity(first)[1] == under(first, {}) and task_identity(second)[1] == under(second, {"labels": 2})
    for i, labels in enumerate((["1e2", "1"], ["1e2", "1.0"], ["True", "False"], ["true", "FALSE"], ["-0", "1"])):
        third = spec(f"third{i}", labels)
        assert task_identity(third)[1] not in (under(third, {}), under(third, {"labels": 2})), labels


def test_each_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    from encoderlab.core import io

    calls = []
    real = io.sha256_of
    monkeypatch.setattr(io, "sha256_of", lambda p: calls.append(p) or real(p))
    spec = folder(tmp_path)
    fingerprints = {task_identity(spec)[1] for _ in range(3)}
    assert len(calls) == 1 and len(fingerprints) == 1
    (tmp_path / "train.csv").write_text("text,label\na,pos\nb,neg\nc,neg\n")
    assert task_identity(spec)[1] not in fingerprints and len(calls) == 2


def test_reports_read_the_newest_version_of_each_task():
    recs = [{"task": "bbc", "fingerprint": "old", "finished": "2026-01-01T00:00:00+00:00", "lr": 1},
            {"task": "bbc", "fingerprint": "new", "finished": "2026-02-01T00:00:00+00:00", "lr": 1},
            {"task": "bbc", "fingerprint": "new", "finished": "2026-01-15T00:00:00+00:00", "lr": 2},
            {"task": "imdb", "fingerprint": "x", "finished": "2025-01-01T00:00:00+00:00", "lr": 1}]
    assert records.current(recs) == recs[1:]


def test_records_of_another_version_are_found_and_named(tmp_path):
    for fp in ("aaa", "bbb"):
        records.write(records.record_path(tmp_path, "ck", "p", "bbc", fp, 1e-3, 0), {"task": "bbc"})
    assert records.other_versions(tmp_path, "ck", "p", "bbc", "ccc") == [tmp_path / "ck/p/bbc/aaa",
                                                                         tmp_path / "ck/p/bbc/bbb"]
    assert records.other_versions(tmp_path, "ck", "p", "bbc", "aaa") == []  # it has records of its own
    assert records.other_versions(tmp_path, "ck", "p", "imdb", "aaa") == []


def test_a_paper_task_read_from_the_hub_is_known_by_its_dataset_id():
    """Without a local copy a paper task is its Hub dataset: a default id that changes (the authors' copies replaced
    earlier ones) gives new records, never the old ones."""
    from encoderlab.tasks import default_hub_id, paper_tasks, task_identity
    from encoderlab.tasks.taskfile import paper_fingerprint

    assert default_hub_id("conll2003") == "hgissbkh/conll2003-en" and default_hub_id("record") == "hgissbkh/record"
    assert all(default_hub_id(name) for name in paper_tasks())
    assert task_identity("record")[1] == paper_fingerprint("record", "hgissbkh/record")
    assert task_identity("record")[1] != paper_fingerprint("record", "super_glue")


def offline_folder(root, name="rt"):
    """An offline task's folder anywhere on disk: what a name that is a path would have found."""
    (root / name).mkdir(parents=True)
    (root / name / "task.json").write_text('{"name": "rt", "family": "classification"}')
    for split in ("train", "validation", "test"):
        (root / name / f"{split}.jsonl").write_text('{"text": "a", "label": "pos"}\n')
    return root / name


def test_a_task_is_a_task_file_or_a_plain_name_never_a_path(tmp_path, monkeypatch):
    """A task name becomes a folder (read under the offline root, written under --out): an absolute or `..` path
    there read a folder elsewhere and wrote its records outside --out. Refused by every entry point, before work."""
    import pytest

    from encoderlab.core.errors import DataError, EncoderlabError
    from encoderlab.hub.mteb_eval import check_task
    from encoderlab.tasks import expand_specs, load_task, task_family, trains_on_its_own

    monkeypatch.chdir(offline_folder(tmp_path / "a" / "tasks").parent)
    for spec in (str(tmp_path / "a/tasks/rt"), "../tasks/rt", "./rt", "rt/", "summary.json"):
        for check in (lambda s: expand_specs([s]), task_identity, task_family, load_task, trains_on_its_own):
            with pytest.raises(DataError, match="neither a task file .* nor a task name"):
                check(spec)
    for spec in ("./rt", "rt/"):  # what a shell completes inside the tasks folder: the name is offered
        with pytest.raises(DataError, match=r"by its name \(by name: 'rt'\)"):
            task_identity(spec)
    for spec in (str(tmp_path / "a/tasks/rt"), "../tasks/rt", "./rt", ".."):
        with pytest.raises(EncoderlabError, match="not a path"):
            check_task(spec, tmp_path / "a" / "tasks")


def test_only_a_paper_dataset_takes_a_local_path(tmp_path):
    """`conll-ner=/etc` scored the bundled conll-ner under that name, the path dropped unread."""
    import pytest

    from encoderlab.core.errors import DataError
    from encoderlab.tasks import expand_specs, split_spec

    for spec in ("conll-ner=/etc", "rt-polarity=data"):
        with pytest.raises(DataError, match="is not one of the paper's datasets, the only tasks that take =PATH"):
            expand_specs([spec])
    with pytest.raises(DataError, match="a task file takes no =PATH"):
        task_identity(folder(tmp_path) + "=/etc")
    assert split_spec("squad=/data/squad") == ("squad", "/data/squad")
    assert split_spec("conll-ner") == ("conll-ner", "")
    for spec in ("squad=", "conll2003= "):  # read as the name alone, it was another dataset than the one meant
        with pytest.raises(DataError, match=f"task '{spec}': nothing after '=': give the local copy"):
            expand_specs([spec])


def test_a_task_file_may_name_its_data_anywhere(tmp_path):
    """The user's own file naming its data explicitly: `..` and absolute paths are read (relative: from its folder)."""
    folder(tmp_path / "data")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "up.yaml").write_text(FILES.replace("train.csv", "../data/train.csv"))
    (tmp_path / "tasks" / "abs.yaml").write_text(FILES.replace("train.csv", str(tmp_path / "data/train.csv")))
    assert task_identity(str(tmp_path / "tasks/up.yaml"))[1] == task_identity(str(tmp_path / "tasks/abs.yaml"))[1]


def test_a_missing_task_file_is_said_as_one_and_a_built_in_name_is_offered(tmp_path, monkeypatch):
    """`rt-polarity.yaml` for the offline task was refused as a missing "config file", with no word of the task."""
    import pytest

    from encoderlab.core.errors import DataError
    from encoderlab.tasks import load_task, task_family, trains_on_its_own

    offline_folder(tmp_path / "home" / "data" / "offline" / "tasks")
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.yaml").mkdir()
    for check in (task_identity, task_family, load_task, trains_on_its_own):
        for spec, hint in (("rt.yaml", "; 'rt', without .yaml, is the offline task of that name"),
                           ("sst2.yml", "; 'sst2', without .yml, is the paper's dataset of that name"),
                           ("bbc.yaml", "")):
            with pytest.raises(DataError) as caught:
                check(spec)
            assert str(caught.value) == (f"task file not found: {tmp_path / spec} ({spec!r} read from the current "
                                         f"folder){hint}")
        with pytest.raises(DataError, match=r"^task file folder\.yaml is a folder: give a task YAML file$"):
            check("folder.yaml")
