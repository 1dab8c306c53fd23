"""`variant:` in a protocol: the families' declared settings at once, under what the protocol sets itself."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from encoderlab.core.io import CONFIGS
from encoderlab.finetuning import migrate_protocol
from encoderlab.finetuning.protocol import Protocol, load_protocol, variants
from encoderlab.tasks import registry

# The authors' choices written out one by one, as configs/eval/paper.yaml held them before `variant:` existed.
AUTHORS_WRITTEN_OUT = {"inputs": "eos", "batch_order": "random", "classification_head": "dense_gelu",
                       "tokens": {"labels": "all_subwords", "dropout": 0.1, "metric": "sentence_macro_f1"},
                       "qa": {"format": "tagging"}, "lr_choice": "per_seed",
                       "retrieval": {"corpus": "judged_any_split", "relevance": "binary", "loss": "mnrl",
                                     "ndcg": "top10_only"}}


def test_the_authors_variant_is_the_settings_written_out_with_the_same_key():
    short = Protocol.model_validate({"name": "p", "variant": "authors"})
    long = Protocol.model_validate({"name": "p", **AUTHORS_WRITTEN_OUT})
    assert short.model_dump() == long.model_dump()
    assert migrate_protocol.key(short.model_dump(mode="json")) == migrate_protocol.key(long.model_dump(mode="json"))
    assert short.follows() == ["authors"] and Protocol().follows() == ["encoderlab"]


def test_each_family_declares_its_part_of_the_authors_variant():
    declared = {record.name: dict(record.variants.get("authors", {})) for record in registry.families()}
    assert set(declared) >= {"classification", "tokens", "qa", "retrieval"}
    assert all(declared[name] for name in ("classification", "tokens", "qa", "retrieval"))
    assert declared["qa"] == {"qa": {"format": "tagging"}}


def test_a_setting_the_protocol_gives_wins_over_its_variant():
    p = Protocol.model_validate({"variant": "authors", "tokens": {"dropout": 0.0}, "inputs": "bos_eos"})
    assert p.tokens.dropout == 0.0 and p.tokens.labels == "all_subwords" and p.inputs == "bos_eos"
    assert p.qa.format == "tagging" and p.follows() == []  # a mix of choices follows no variant whole


def test_variant_encoderlab_restores_every_default_a_base_file_changed():
    paper = load_protocol(CONFIGS / "eval" / "paper.yaml", ["variant=encoderlab"])
    defaults = Protocol()
    assert (paper.inputs, paper.classification_head, paper.tokens, paper.qa, paper.lr_choice) == (
        defaults.inputs, defaults.classification_head, defaults.tokens, defaults.qa, defaults.lr_choice)
    assert paper.retrieval.train_on == "msmarco"  # the study's data stays
    assert paper.sentence_pairs == "labelled" and paper.holdout == "train_test_split"


def test_an_unknown_variant_is_refused_naming_the_known_ones():
    with pytest.raises(ValidationError, match="variant: 'author' is not a variant; known: encoderlab, authors"):
        Protocol.model_validate({"variant": "author"})


def test_a_registered_family_brings_its_own_variant():
    base = registry.family("classification")
    record = registry.Family(
        name="pairs-test", category="PT", settings=base.settings, load_user=base.load_user, export=base.export,
        card=base.card, standard_metric="spearman", baselines={"mean": "mean"},
        variants={"authors": {"tokens": {"dropout": 0.3}}, "fast": {"batch_order": "length_buckets"}})
    registry.register(record)
    try:
        assert set(variants()) == {"encoderlab", "authors", "fast"}
        assert Protocol.model_validate({"variant": "authors"}).tokens.dropout == 0.3
        assert Protocol.model_validate({"variant": "fast", "batch_order": "random"}).batch_order == "random"
    finally:
        registry.unregister("pairs-test")
