"""The identity of a task: what its records are kept by (its name and a fingerprint of definition and data)."""
from __future__ import annotations

from encoderlab.finetuning import records
from encoderlab.tasks import task_identity, taskfile

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


def test_each_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    calls = []
    real = taskfile.sha256_of
    monkeypatch.setattr(taskfile, "sha256_of", lambda p: calls.append(p) or real(p))
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
