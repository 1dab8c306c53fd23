"""Records and the protocols they hold, read through their migrations: a record or protocol written before formats had
versions (format 0) reads as it did then, a newer format is refused in one line, the current one round-trips, and
no protocol key (the folder records are filed under) changes."""
from __future__ import annotations

import copy
import json

import pytest

from encoderlab.core import formats
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS, sha256_of
from encoderlab.finetuning import migrate_protocol, migrate_records, records
from encoderlab.finetuning.protocol import Protocol, load_protocol

# A protocol as records stored it before the settings added later existed (no format_version either).
OLD_PROTOCOL = {"name": "old", "max_steps": 100, "epochs": 1.0, "batch_size": 16, "eval_batch_size": 64,
                "lrs": [1e-4], "seeds": [0], "warmup_fraction": 0.1, "decay": "linear",
                "optim": {"betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01, "grad_clip": 1.0},
                "max_length": 128, "max_length_by_family": {}, "selection_split": "validation", "dtype": "fp32",
                "max_train_examples": None, "max_eval_examples": None, "max_corpus_documents": None,
                "curve_every": 10, "wandb": None, "task_overrides": {}}


def test_format_versions_newer_than_the_code_or_not_whole_numbers_are_refused_naming_the_file():
    assert formats.version_of({}, "f.json", 1) == 0
    assert formats.version_of({"format_version": 1}, "f.json", 1) == 1
    with pytest.raises(EncoderlabError, match=r"^f.json has format_version 3, newer than 1, the newest this "):
        formats.version_of({"format_version": 3}, "f.json", 1)
    for bad in ("1", True, -1, 1.0):
        with pytest.raises(EncoderlabError, match=r"^f.json: format_version .* is not a format version"):
            formats.version_of({"format_version": bad}, "f.json", 1)


def test_protocol_keys_are_those_records_were_filed_under():
    """Pinned, by key algorithm: 1, the keys the shipped protocols and a protocol of format 0 had before formats were
    versioned, and before the grid left the key (folders on users' disks, finetuning/migrate_keys.py); 2, today's."""
    assert migrate_protocol.KEY_ALGORITHM == 2
    for name, key1, key2 in (("demo", "demo-3a19fd28", "demo-07a18fcd"),
                             ("small-study-authors", "small-study-authors-38299fb4", "small-study-authors-980cba03")):
        protocol = load_protocol(CONFIGS / "eval" / f"{name}.yaml", []).model_dump(mode="json")
        assert protocol["format_version"] == migrate_protocol.FORMAT
        assert migrate_protocol.key(protocol, 1) == key1 and records.protocol_key(protocol) == key2
        assert records.protocol_key({**protocol, "lrs": [1e-3], "seeds": [7]}) == key2  # the grid is not hashed
    assert migrate_protocol.key(OLD_PROTOCOL, 1) == "old-9c6b60c8"
    assert records.protocol_key(OLD_PROTOCOL) == "old-2dd3a47f"
    assert records.protocol_key(migrate_protocol.upgrade(OLD_PROTOCOL, "r.json")) == "old-2dd3a47f"
    assert migrate_protocol.key(migrate_protocol.upgrade(OLD_PROTOCOL, "r.json"), 1) == "old-9c6b60c8"
    judged = {**OLD_PROTOCOL, "retrieval": {"train_on": None, "corpus": "judged", "relevance": "graded",
                                            "loss": "infonce"}}
    assert records.protocol_key(migrate_protocol.upgrade(judged, "r.json")) == "old-8efc2e7a"  # hashed: not the old
    with pytest.raises(ValueError, match="key algorithm 3: this encoderlab knows 1 and 2"):
        migrate_protocol.key(OLD_PROTOCOL, 3)


def test_a_protocol_of_format_0_reads_at_the_values_it_ran_with():
    upgraded = migrate_protocol.upgrade(OLD_PROTOCOL, "r.json")
    assert upgraded == Protocol.model_validate(OLD_PROTOCOL).model_dump(mode="json")
    assert upgraded["retrieval"]["ndcg"] == "standard" and upgraded["lr_choice"] == "mean_over_seeds"
    sectioned = {**OLD_PROTOCOL, "retrieval": {"train_on": None, "corpus": "all", "relevance": "binary",
                                               "loss": "infonce"}}  # before retrieval.ndcg
    assert migrate_protocol.upgrade(sectioned, "r.json")["retrieval"] == {**sectioned["retrieval"], "ndcg": "standard"}
    assert OLD_PROTOCOL.get("format_version") is None  # the stored dict is left as read


def test_a_protocol_of_a_newer_format_is_refused_and_a_file_cannot_name_another():
    with pytest.raises(EncoderlabError, match=r"r.json \(its protocol\) has format_version 2, newer than 1"):
        migrate_records.upgrade({"protocol": {**OLD_PROTOCOL, "format_version": 2}}, "r.json")
    with pytest.raises(ValueError, match="format_version: 2; a protocol is written in format 1"):
        Protocol(format_version=2)


def old_record(checkpoint) -> dict:
    """A record as a sweep wrote it before records named their weights, their training task or their full-text
    baselines."""
    return {"checkpoint": str(checkpoint), "tag": "m-step", "task": "rt-polarity", "fingerprint": "f" * 16,
            "family": "classification", "metric": "accuracy", "status": "ok", "protocol": OLD_PROTOCOL,
            "lr": 0.001, "seed": 0, "scores": {"validation": {"score": 60.0}, "test": {"score": 61.0}},
            "baseline": {s: {"score": 50.0} for s in ("validation", "test")},
            "baselines": {s: {"majority": {"score": 50.0}, "tfidf_logreg": {"score": 70.0}}
                          for s in ("validation", "test")}}


def place(root, record: dict):
    path = records.record_path(root, record["tag"], records.protocol_key(record["protocol"]), record["task"],
                               record["fingerprint"], record["lr"], record["seed"])
    records.write(path, record)
    return path


def test_a_record_of_format_0_reads_as_the_sweep_read_it(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    (checkpoint / "state.json").write_text(json.dumps({"step": 4, "manifest": False}))
    digest = sha256_of(checkpoint / "model.safetensors")
    path = place(tmp_path / "evals", old_record(checkpoint))
    record, why = records.usable(path, digest)
    assert why == "" and record["format_version"] == migrate_records.FORMAT
    assert record["trained_on"] == {"task": "rt-polarity", "fingerprint": "f" * 16}  # trained on its own task
    assert record[records.WEIGHTS] == digest
    assert record["baselines"]["test"] == {"majority": {"score": 50.0}, "tfidf_logreg_full_text": {"score": 70.0}}
    assert record["protocol"] == migrate_protocol.upgrade(OLD_PROTOCOL, path)
    assert records.recorded(tmp_path / "evals", "m-step", path.parent.parent.parent.name,
                            [("rt-polarity", "f" * 16)], "f" * 16, 0.001, 0, digest) == [record]
    assert records.usable(path, "0" * 64)[1].startswith("was made from other weights")
    (checkpoint / "model.safetensors").unlink()
    assert records.usable(path, digest)[1] == (f"was made before records named their weights, and the checkpoint it "
                                               f"names ({checkpoint}) is gone or unreadable: which weights made it "
                                               "cannot be told")


def test_a_current_record_round_trips_and_a_newer_one_is_refused(tmp_path):
    current = {**old_record(tmp_path), "format_version": migrate_records.FORMAT, records.WEIGHTS: "a" * 64,
               "trained_on": {"task": "sst2", "fingerprint": "e" * 16},
               "protocol": Protocol.model_validate(OLD_PROTOCOL).model_dump(mode="json")}
    current["baselines"] = copy.deepcopy(current["baselines"])
    current["baselines"]["test"]["bm25"] = {"score": 1.0}  # a current record's names are its own
    current["baselines"]["test"]["tfidf_logreg_full_text"] = {"score": 2.0}
    path = place(tmp_path / "evals", current)
    assert records.usable(path, "a" * 64) == (current, "")
    path.write_text(json.dumps({**current, "format_version": 2}))
    with pytest.raises(EncoderlabError, match=rf"^{path} has format_version 2, newer than 1, the newest"):
        records.usable(path, "a" * 64)


def test_baselines_of_a_record_from_before_the_models_view_read_as_the_summary_read_them(tmp_path):
    """What tasks/baselines.py `of_records` made of such a record, the migration makes of the record itself."""
    from encoderlab.finetuning.aggregate import summarize

    old = {**old_record(tmp_path), "family": "retrieval", "metric": "ndcg@10",
           "baselines": {"test": {"random": {"score": 1.0}, "bm25": {"score": 80.0}}}}
    upgraded = migrate_records.upgrade(old, "r.json")
    assert upgraded["baselines"] == {"test": {"random": {"score": 1.0}, "bm25_full_text": {"score": 80.0}}}
    [entry] = summarize([upgraded])["tasks"].values()
    assert entry["baselines"] == {"random": 1.0, "bm25_full_text": 80.0}
    assert entry["strongest_baseline"] == {"name": "bm25_full_text", "value": 80.0}
