"""The pretraining loop: resume equals no interruption, phases, checkpoints, LR schedules, config errors."""
from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import re
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file

from encoderlab.core.config import ConfigError, apply_overrides, validate
from encoderlab.core.errors import EncoderlabError
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import lr_factor
from encoderlab.pretraining.config import PretrainConfig
from encoderlab.pretraining.loop import Trainer
from encoderlab.pretraining.setup import describe
from encoderlab.runs import checkpoint
from encoderlab.runs.migrate_checkpoint import run_config
from encoderlab.runs.schedule import LRSchedule

TINY = {"preset": "tiny", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}


def make_config(tmp_path, packed_dir, **over) -> PretrainConfig:
    data = {
        "name": over.pop("name", "run"), "out_dir": str(tmp_path), "data": {"path": str(packed_dir)},
        "model": TINY, "objective": over.pop("objective", "mlm40"),
        "lr_schedule": {"kind": "wsd", "warmup_steps": min(2, over.get("steps", 10)), "decay_steps": 3},
        "train": {"steps": 10, "global_batch": 4, "dtype": "fp32", "log_every": 1, "eval_batches": 1,
                  "tensorboard": False, **over},
    }
    return validate(PretrainConfig, data, "test")


def weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / checkpoint.checkpoint_name(step) / "model.safetensors"))


def written_before_manifests(folder):
    """Make `folder` a checkpoint as encoderlab wrote them before checksums.json (and its mention in state.json)."""
    (folder / checkpoint.MANIFEST).unlink()
    state = json.loads((folder / "state.json").read_text())
    del state["manifest"], state["format_version"]
    (folder / "state.json").write_text(json.dumps(state))


def test_resume_equals_no_interruption(tmp_path, packed_dir):
    schedule = "clm:40%,mlm40:60%"
    Trainer(make_config(tmp_path, packed_dir, name="straight", objective=schedule, log_every=4),
            show_progress=False).run()
    # Killed after step 8: the last checkpoint is the stable one of step 7, so step 8 is redone on resume; the log
    # line of step 8 averages steps 5-8, three of them trained before the kill.
    cut = make_config(tmp_path, packed_dir, name="cut", objective=schedule, save_every=3, log_every=4)
    Trainer(cut, show_progress=False).run(stop_at=8)
    assert checkpoint.latest(tmp_path / "cut").name == "step-0000007"
    resumed = Trainer(make_config(tmp_path, packed_dir, name="cut", objective=schedule, save_every=3, log_every=4),
                      show_progress=False, resume=True)
    assert resumed.step == 7
    resumed.run()
    a, b = weights(tmp_path / "straight", 10), weights(tmp_path / "cut", 10)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    def lines(run):  # all but the throughput, a timing
        records = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records]

    assert [r["step"] for r in lines("cut")] == [4, 8, 10]  # the redone step 8 is logged once
    assert lines("cut") == lines("straight")


def test_checkpoints_at_phase_switch_stable_and_end(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, objective="clm:4,mlm40:rest")
    summary = Trainer(cfg, show_progress=False).run()
    reasons = {p.name: checkpoint.load_state(p)["reason"] for p in (tmp_path / "run" / "checkpoints").iterdir()}
    assert reasons == {"step-0000004": "phase", "step-0000007": "stable", "step-0000010": "final"}
    state = checkpoint.load_state(tmp_path / "run" / "checkpoints" / "step-0000004")
    assert state["objective"] == "mlm40" and state["data"]["samples_seen"] == 16
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in records] == ["clm"] * 4 + ["mlm40"] * 6
    assert all("clm/loss" in r for r in records[:4]) and all("mlm40/loss" in r for r in records[4:])
    assert "val/loss_mlm40" in records[-1] and math.isfinite(records[-1]["val/loss_mlm40"])
    assert summary["steps"] == 10


def test_training_lowers_the_loss(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=40, objective="clm")
    cfg.optim.lr = 3e-3
    Trainer(cfg, show_progress=False).run()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["clm/loss"] < records[0]["clm/loss"] - 1.0


def test_micro_batches_give_the_same_update(tmp_path, packed_dir):
    whole = Trainer(make_config(tmp_path, packed_dir, name="whole", steps=2), show_progress=False)
    split = Trainer(make_config(tmp_path, packed_dir, name="split", steps=2, micro_batch=1), show_progress=False)
    whole.run(), split.run()
    a, b = weights(tmp_path / "whole", 2), weights(tmp_path / "split", 2)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_existing_run_needs_resume(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False).run()
    with pytest.raises(EncoderlabError, match="--resume"):
        Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False)


def test_wsd_schedule_shape():
    s = LRSchedule(kind="wsd", warmup_steps=10, decay_steps=20)
    f = [s.factor(i, 100) for i in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0
    assert all(x == 1.0 for x in f[10:80])
    assert s.decay_start(100) == 80 and f[80] == 1.0 and f[99] == pytest.approx(1 / 20)
    assert all(a > b for a, b in zip(f[80:], f[81:]))
    sqrt = LRSchedule(kind="wsd", warmup_steps=0, decay_steps=4, decay_shape="1-sqrt")
    assert [round(sqrt.factor(i, 4), 4) for i in range(4)] == [1.0, 0.5, round(1 - math.sqrt(0.5), 4),
                                                                 round(1 - math.sqrt(0.75), 4)]
    cos = LRSchedule(kind="cosine", warmup_steps=0, min_lr_ratio=0.1)
    assert cos.factor(0, 100) == pytest.approx(1.0) and cos.factor(100, 100) == pytest.approx(0.1)


def test_one_schedule_for_pretraining_and_fine_tuning():
    """Fine-tuning's warmup and linear decay is pretraining's schedule function (WSD whose decay starts after the
    warmup); decay_steps exists for WSD only, and run folders that wrote the unused default still load."""
    protocol = Protocol(name="p", warmup_fraction=0.1)
    wsd = LRSchedule(kind="wsd", warmup_steps=15, decay_steps=135)
    assert [lr_factor(s, 150, protocol) for s in range(150)] == [wsd.factor(s, 150) for s in range(150)]
    constant = Protocol(name="p", warmup_fraction=0.1, decay="constant")
    assert [lr_factor(s, 150, constant) for s in range(150)] == [
        LRSchedule(kind="constant", warmup_steps=15).factor(s, 150) for s in range(150)]
    assert LRSchedule().decay_steps == 2000 and LRSchedule(kind="cosine").decay_steps is None
    with pytest.raises(ValueError, match="holds decay_steps: .*, which applies to kind 'wsd' only"):
        LRSchedule(kind="cosine", decay_steps=100)
    older_dump = {"lr_schedule": {"kind": "cosine", "decay_steps": 2000}}  # read through runs/migrate_checkpoint.py
    assert LRSchedule.model_validate(run_config(older_dump)["lr_schedule"]).decay_steps is None


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"^x\.yaml: train\.stepz: unknown key \(did you mean 'train\.steps'\?; "
                                          r"allowed in train: .*global_batch"):
        validate(PretrainConfig, {"train": {"steps": 1, "global_batch": 2, "stepz": 3}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"^--set train\.stepz=3: train\.stepz: unknown key"):  # not the file's fault
        validate(PretrainConfig, {"train": {"steps": 1, "global_batch": 2, "stepz": 3}}, "x.yaml", ["train.stepz=3"])
    with pytest.raises(ConfigError, match=r"train: .*micro_batch 3 must divide global_batch 4"):
        validate(PretrainConfig, {"train": {"steps": 1, "global_batch": 4, "micro_batch": 3}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"lr_schedule\.kind"):
        validate(PretrainConfig, {"lr_schedule": {"kind": "exp"}, "train": {"steps": 1, "global_batch": 2}}, "x")
    data = apply_overrides({"train": {"steps": 1}}, ["train.steps=5", "optim.lr=3e-4", "objective=clm:25%,mlm:75%"])
    assert data == {"train": {"steps": 5}, "optim": {"lr": 3e-4}, "objective": "clm:25%,mlm:75%"}
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["train.steps"])


def test_a_check_across_keys_says_which_value_came_from_set():
    """`--set train.global_batch=4` over a file's micro_batch 8 said `x.yaml: train: micro_batch 8 must divide
    global_batch 4`, as if the file held 4."""
    data = {"train": {"steps": 1, "global_batch": 4, "micro_batch": 8}, "optim": {"lr": 1e-3}}
    sets = ["optim.lr=1e-3", "train.global_batch=8", "train.global_batch = 4", "train.steps=1"]
    with pytest.raises(ConfigError, match=r"^x\.yaml: train: micro_batch 8 must divide global_batch 4 "
                                          r"\(train\.global_batch=4 from --set\)$"):
        validate(PretrainConfig, data, "x.yaml", sets)
    with pytest.raises(ConfigError, match=r"\(train\.micro_batch=8, train\.global_batch=4 from --set\)$"):
        validate(PretrainConfig, data, "x.yaml", ["train.micro_batch=8", "train.global_batch=4"])
    # both from the file: nothing added, and not the section's whole mapping (`(got {'steps': 1, ...})`)
    with pytest.raises(ConfigError, match=r"^x\.yaml: train: micro_batch 8 must divide global_batch 4$"):
        validate(PretrainConfig, data, "x.yaml", ["optim.lr=1e-3"])


def test_set_updates_a_section_and_replaces_it_only_when_told():
    base = {"lr_schedule": {"kind": "wsd", "warmup_steps": 25, "decay_steps": 50}, "train": {"steps": 250}}
    merged = apply_overrides(copy.deepcopy(base), ["lr_schedule={warmup_steps: 1}"])
    assert merged["lr_schedule"] == {"kind": "wsd", "warmup_steps": 1, "decay_steps": 50}  # was: {warmup_steps: 1}
    replaced = apply_overrides(copy.deepcopy(base), ["lr_schedule!={warmup_steps: 1}", "train.steps != 9"])
    assert replaced == {"lr_schedule": {"warmup_steps": 1}, "train": {"steps": 9}}
    nested = apply_overrides({"a": {"b": {"c": 1, "d": 2}}}, ["a={b: {c: 3}}"])
    assert nested == {"a": {"b": {"c": 3, "d": 2}}}
    bad = "lr_schedule!={warmup_stepz: 1}"
    with pytest.raises(ConfigError, match=r"^--set lr_schedule!=\{warmup_stepz: 1\}: lr_schedule\.warmup_stepz: unkn"):
        validate(PretrainConfig, apply_overrides(copy.deepcopy(base), [bad]), "x.yaml", [bad])
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["!=3"])


def test_a_boolean_where_a_number_goes_is_refused_not_read_as_one_or_zero():
    from encoderlab.finetuning.protocol import Protocol
    from encoderlab.study.spec import StudySpec

    sets = ["train.global_batch=yes", "optim.betas=[0.9, true]", "train.tensorboard=yes"]  # the last is a boolean
    with pytest.raises(ConfigError) as caught:
        validate(PretrainConfig, apply_overrides({"train": {"steps": 4}}, sets), "x.yaml", sets)
    assert str(caught.value) == ("--set train.global_batch=yes: train.global_batch: takes a number, not true; --set "
                                 "optim.betas=[0.9, true]: optim.betas.1: takes a number, not true (YAML reads "
                                 "yes/no/true/false/on/off as booleans)")
    # a model field beside the preset (the section's extra keys): `hidden_size: true` was read as 1
    with pytest.raises(ConfigError, match=r"^x\.yaml: model\.hidden_size: takes a number, not true"):
        validate(PretrainConfig, {"train": {"steps": 4}, "model": {"hidden_size": True, "tie_word_embeddings": False}},
                 "x.yaml")
    with pytest.raises(ConfigError, match=r"^p\.yaml: max_eval_examples: takes a number, not false"):  # int | None
        validate(Protocol, {"max_eval_examples": False}, "p.yaml")
    with pytest.raises(ConfigError, match=r"^s\.yaml: budget: takes a number, not true"):
        validate(StudySpec, {"name": "s", "pretrain": "p.yaml", "budget": True}, "s.yaml")
    # a number or a word (int | Literal["auto"]), a mapping's values, a section inside a mapping
    with pytest.raises(ConfigError, match=r"^p\.yaml: max_length: takes a number, not true"):
        validate(Protocol, {"max_length": True}, "p.yaml")
    with pytest.raises(ConfigError, match=r"^p\.yaml: max_length_by_family\.qa: takes a number, not true"):
        validate(Protocol, {"max_length_by_family": {"qa": True}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"task_overrides\.wiki-topic\.batch_size: takes a number, not true"):
        validate(Protocol, {"task_overrides": {"wiki-topic": {"batch_size": True}}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"^s\.yaml: imported\.sm\.seq_len: takes a number, not true"):
        validate(StudySpec, {"name": "s", "pretrain": "p.yaml", "budget": 4,
                             "imported": {"sm": {"source": "smollm2", "seq_len": True}}}, "s.yaml")
    fine = {"train": {"steps": 40, "global_batch": 2, "tensorboard": True}, "lr_schedule": {"warmup_steps": 2}}
    assert validate(PretrainConfig, fine, "x").train.tensorboard


@pytest.mark.parametrize(("extra", "message"), [
    ({"lr_schedule": {"warmup_steps": 11}}, r"^lr_schedule\.warmup_steps=11 is longer than the run \(train\.steps"),
    ({"train": {"save_at": [4, 12]}}, r"^train\.save_at=\[12\] lies outside the run's steps 1\.\.10"),
    ({"train": {"save_at": [0]}}, r"^train\.save_at=\[0\]"),
])
def test_steps_past_the_run_are_refused_in_one_line(extra, message):
    data = {"lr_schedule": {"warmup_steps": 2}, "train": {"steps": 10, "global_batch": 2}}
    for section, values in extra.items():
        data[section] = {**data.get(section, {}), **values}
    with pytest.raises(ConfigError) as err:
        validate(PretrainConfig, data, "x.yaml")
    [line] = str(err.value).splitlines()
    assert re.match(message, line.removeprefix("x.yaml: ")) and "Value error" not in line and "(got" not in line


def test_non_positive_fine_tuning_lrs_are_refused():
    from encoderlab.finetuning.protocol import Protocol

    for lrs in ([0.0], [1e-3, -1e-3]):
        with pytest.raises(ConfigError, match=r"lrs\.\d: Input should be greater than 0"):
            validate(Protocol, {"lrs": lrs}, "protocol.yaml")


def test_branch_equals_a_straight_run_with_that_schedule(tmp_path, packed_dir):
    # Trunk: 10 steps, decay over the last 3 -> stable checkpoint at step 7. Branch: a 14-step budget from it.
    Trainer(make_config(tmp_path, packed_dir, name="trunk", objective="clm"), show_progress=False).run()
    stable = tmp_path / "trunk" / "checkpoints" / "step-0000007"
    assert checkpoint.load_state(stable)["reason"] == "stable"
    branch = make_config(tmp_path, packed_dir, name="branch", objective="clm:7,mlm40:rest", steps=14)
    branch.init.branch_from = str(stable)
    Trainer(branch, show_progress=False).run()
    straight = make_config(tmp_path, packed_dir, name="straight", objective="clm:7,mlm40:rest", steps=14)
    Trainer(straight, show_progress=False).run()
    a, b = weights(tmp_path / "branch", 14), weights(tmp_path / "straight", 14)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_branch_from_inside_the_decay_is_refused(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, name="trunk", objective="clm"), show_progress=False).run()
    late = make_config(tmp_path, packed_dir, name="late", steps=14)
    late.init.branch_from = str(tmp_path / "trunk")  # the run folder: its final, decayed checkpoint
    with pytest.raises(EncoderlabError, match="stable"):
        Trainer(late, show_progress=False)
    with pytest.raises(EncoderlabError, match="stable"):  # --dry-run refuses it too
        describe(late)
    wide = make_config(tmp_path, packed_dir, name="wide", steps=14, save_at=[2])
    Trainer(make_config(tmp_path, packed_dir, name="trunk2", steps=14, save_at=[2]), show_progress=False).run(
        stop_at=2)
    wide = validate(PretrainConfig, {**wide.model_dump(mode="json"), "model": {**TINY, "hidden_size": 64},
                                     "init": {"branch_from": str(tmp_path / "trunk2")}}, "test")
    with pytest.raises(EncoderlabError, match=r"does not fit the configured model: model\.embed_tokens\.weight: "
                                              r"checkpoint \(\d+, 32\) vs model \(\d+, 64\)"):
        describe(wide)  # --dry-run reads the weights' shapes as the run does
    assert not (tmp_path / "late").exists() and not (tmp_path / "wide").exists()


def test_an_unknown_preset_is_refused_naming_the_file_and_key():
    with pytest.raises(ConfigError, match=r"^x\.yaml: model\.preset: unknown model preset 'nano'; available: micro, "):
        validate(PretrainConfig, {"model": {"preset": "nano"}, "train": {"steps": 4, "global_batch": 2}}, "x.yaml")


def test_a_run_too_short_for_its_warmup_and_decay_says_how_the_decay_is_cut():
    data = {"lr_schedule": {"warmup_steps": 25, "decay_steps": 50}, "train": {"steps": 30, "global_batch": 2}}
    assert validate(PretrainConfig, data, "x").schedule_note() == (
        "lr_schedule: warmup_steps 25 + decay_steps 50 exceed train.steps 30: the decay starts when the warmup ends, "
        "at step 25, and lasts 5 steps")
    data["train"]["steps"] = 26
    assert validate(PretrainConfig, data, "x").schedule_note().endswith("at step 25, and lasts 1 step")
    data["train"]["steps"] = 25
    assert validate(PretrainConfig, data, "x").schedule_note().endswith(": the warmup ends with the run: the LR "
                                                                         "never decays")
    data["train"]["steps"] = 75
    assert validate(PretrainConfig, data, "x").schedule_note() is None


def test_from_weights_loads_weights_only(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, name="base", steps=3), show_progress=False).run()
    cpt = make_config(tmp_path, packed_dir, name="cpt", steps=3)
    cpt.init.from_weights = str(tmp_path / "base")
    trainer = Trainer(cpt, show_progress=False)
    assert trainer.step == 0 and trainer.loader.samples_seen == 0
    for k, v in weights(tmp_path / "base", 3).items():
        torch.testing.assert_close(trainer.model.state_dict()[k], v, rtol=0, atol=0)
    bigger = make_config(tmp_path, packed_dir, name="bigger", steps=3)
    bigger.model = type(bigger.model)(**{**TINY, "hidden_size": 64, "intermediate_size": 128})
    bigger.init.from_weights = str(tmp_path / "base")
    # It listed weight names (`unexpected model.layers.10...` for an imported SmolLM2 under the default preset): the
    # shapes to set are what the caller can act on.
    with pytest.raises(EncoderlabError, match=r"^init\.from_weights .*/base/checkpoints/step-0000003: the configured "
                       r"model is not this checkpoint's \(model\.hidden_size is 64 here, 32 in its model_config\.json; "
                       r"model\.intermediate_size is 128 here, 64 in its model_config\.json\): set the model section "
                       r"to its shapes \(`data prepare --tokenizer .*/base` prints them as --set options\)$"):
        Trainer(bigger, show_progress=False)


def test_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, packed_dir, monkeypatch):
    cfg = make_config(tmp_path, packed_dir, steps=6, save_every=2)
    trainer = Trainer(cfg, show_progress=False)
    real_save_file = checkpoint.save_file
    calls = {"n": 0}

    def crash_on_second(*args, **kwargs):
        calls["n"] += 1
        real_save_file(*args, **kwargs)
        if calls["n"] == 2:
            raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", crash_on_second)
    with pytest.raises(OSError, match="disk full"):
        trainer.run()
    assert checkpoint.latest(tmp_path / "run").name == "step-0000002"
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-0000002"]
    monkeypatch.setattr(checkpoint, "save_file", real_save_file)
    resumed = Trainer(make_config(tmp_path, packed_dir, steps=6, save_every=2), show_progress=False, resume=True)
    assert resumed.step == 2
    resumed.run()


def test_logged_lr_follows_wsd_exactly(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=12)
    Trainer(cfg, show_progress=False).run()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    expected = [cfg.optim.lr * cfg.lr_schedule.factor(s, 12) for s in range(12)]
    assert [r["lr"] for r in records] == pytest.approx(expected, rel=0, abs=1e-15)
    assert expected[0] < expected[1] == expected[8] and expected[9] > expected[10] > expected[11] > 0


def test_mixed_phase_logs_each_objective(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=12, objective="mix(clm=1,mlm30=1):50%,mlm40")
    Trainer(cfg, show_progress=False).run()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    seen = {k.split("/")[0] for r in records[:6] for k in r if k.endswith("/loss")}
    assert seen == {"clm", "mlm30"}
    assert all("mlm40/loss" in r for r in records[6:])


def test_a_step_that_masks_no_token_is_no_loss(tmp_path, packed_dir):
    """A rate of 0.4% masks about one of a step's 256 tokens: some steps mask none. Such a step's loss (0) is left
    out of the logged means, the summary and train.loss_spike's baseline, which a 0 would make stop any run."""
    def run(name, log_every, **train):
        said = []
        cfg = make_config(tmp_path, packed_dir, name=name, objective="mlm0.4", log_every=log_every, **train)
        summary = Trainer(cfg, show_progress=False, log=said.append).run()
        return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()], summary, said

    each, _, said = run("each", 1, loss_spike=3)  # one token's loss varies, but never 3-fold
    empty = [r["step"] for r in each if r["mlm0.4/predicted_tokens"] == 0]
    assert empty and max(empty) < 10 and len(each) == 10  # the seeded draws give both kinds of step
    assert all("mlm0.4/loss" not in r and "mlm0.4/accuracy" not in r and "mlm0.4/grad_norm" not in r
               for r in each if r["step"] in empty)
    assert [line for line in said if "predicted no token" in line] == [
        "mlm0.4: a step predicted no token (its masks selected none: short documents or a low rate); such steps are "
        "left out of the logged loss, accuracy and gradient-norm means and of train.loss_spike's baseline (said once)"]
    grouped, summary, _ = run("grouped", 5, loss_spike=1.5)  # with a 0 as its baseline, any loss would be a spike
    for record in grouped:
        steps = [r for r in each if record["step"] - 5 < r["step"] <= record["step"] and r["step"] not in empty]
        assert record["mlm0.4/loss"] == pytest.approx(sum(r["mlm0.4/loss"] for r in steps) / len(steps), rel=1e-6)
    assert summary["final"]["mlm0.4/loss"] == grouped[-1]["mlm0.4/loss"] > 1


def test_every_multiple_of_eval_every_evaluates_whatever_log_every_is(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, log_every=4, eval_every=3), show_progress=False).run()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 4, 6, 8, 9, 10]
    assert [r["step"] for r in records if "val/loss_mlm40" in r] == [3, 6, 9, 10]  # 10: the last step
    assert [r["step"] for r in records if "mlm40/loss" in r] == [4, 8, 10]  # the training means keep their windows
    assert set(records[0]) == {"step", "phase", "tokens", "val/loss_mlm40"}


def test_a_standalone_run_beats_between_its_log_lines(tmp_path, packed_dir, monkeypatch, capsys):
    """Without a terminal (CI, `> log`), a line at least every 30 s although log_every is past the run's end; the
    clock is a fake one, 31 s a reading."""
    from encoderlab.pretraining import loop
    from encoderlab.runs.logging import Progress

    seconds = itertools.count(0, 31)
    monkeypatch.setattr(loop, "Progress", functools.partial(Progress, clock=lambda: next(seconds)))
    Trainer(make_config(tmp_path, packed_dir, steps=4, log_every=100), log=lambda m: None).run()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in lines] == ["step 1/4", "step 2/4", "step 3/4", "step 4/4"]
    assert lines[0] == "step 1/4  62.00 s/step  eta 3.1 min" and " loss " in lines[-1]


@pytest.mark.parametrize("objective, message", [
    ("mlm0", "strictly between 0 and 1"),
    ("mlm100", "strictly between 0 and 1"),
    ("clm:50%,mlm40:40%", r"give \[5, 4\] steps, which must be positive and add up to the run's 10 steps"),
    ("clm:8,mlm40:3", r"give \[8, 3\] steps"),
    ("clm:12,mlm40", r"give \[12, -2\] steps"),
    ("clm,mlm40", "only the last phase may omit its length"),
    ("clm:1/2,mlm40", "length '1/2' must be a percentage"),
    ("mix(clm):50%,mlm40", "mixes fewer than two objectives"),
    ("xlm", "unknown objective 'xlm': use 'clm', 'mlm' or 'mlmNN'"),
    (7, "must be a schedule such as 'mlm40'"),
])
def test_bad_objectives_are_config_errors_naming_the_key(tmp_path, packed_dir, objective, message):
    """Schedule errors fail in config validation, one line naming the key and the value like every config error."""
    with pytest.raises(ConfigError, match=message) as info:
        make_config(tmp_path, packed_dir, objective=objective)
    [line] = str(info.value).splitlines()
    assert line.startswith("test: objective: ") and line.endswith(f"(got {objective!r})")
    if message.startswith("give"):
        return
    with pytest.raises(ConfigError, match=r"train\.steps: .*greater than 0"):  # a bad train.steps is the error
        make_config(tmp_path, packed_dir, steps=0, objective="clm:50%,mlm40:50%")


def test_schedule_reads_and_writes_as_the_users_string(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=12, objective="clm:25%,mix(clm=1,mlm30=3):3,mlm40:rest")
    assert [(p.objective.name, p.start, p.end) for p in cfg.phases] == [
        ("clm", 0, 3), ("mix(clm=1,mlm30=3)", 3, 6), ("mlm40", 6, 12)]
    assert cfg.model_dump(mode="json")["objective"] == "clm:25%,mix(clm=1,mlm30=3):3,mlm40:rest"
    assert validate(PretrainConfig, cfg.model_dump(mode="json"), "again").phases == cfg.phases
    assert make_config(tmp_path, packed_dir, objective="mlm40").phases == make_config(tmp_path, packed_dir).phases


def test_windows_longer_than_positions_and_mlm_without_mask_fail(tmp_path, packed_dir):
    from encoderlab.data import migrate_packed
    from encoderlab.model.presets import preset
    from encoderlab.pretraining import objectives
    from encoderlab.pretraining.setup import check_compatible

    cfg = make_config(tmp_path, packed_dir)
    cfg.model = type(cfg.model)(**{**TINY, "max_position_embeddings": 32})
    with pytest.raises(EncoderlabError, match="64 tokens but the model's positions stop at 32"):
        Trainer(cfg, show_progress=False)
    # an index of format 1, written before the largest id was recorded: read as data/migrate_packed.py reads it
    meta = migrate_packed.upgrade({"format": 1, "seq_len": 64, "tokenizer": {"mask_id": None, "vocab_size": 320}},
                                  "meta.json")
    with pytest.raises(EncoderlabError, match="no mask token"):
        check_compatible(cfg, preset("tiny", vocab_size=320), meta, objectives.Schedule.parse("clm:50%,mlm").phases(10))
    check_compatible(cfg, preset("tiny", vocab_size=320), meta, objectives.Schedule.parse("clm").phases(10))
    # Token ids against the model's vocabulary: the largest recorded at packing (format 1: the tokenizer's last id).
    clm = objectives.Schedule.parse("clm").phases(10)
    check_compatible(cfg, preset("tiny", vocab_size=300), {**meta, "max_token_id": 299}, clm)
    for index, top in (({**meta, "max_token_id": 300}, 300), (meta, 319)):
        with pytest.raises(EncoderlabError, match=f"token ids go up to {top} but the model's vocabulary has 300"):
            check_compatible(cfg, preset("tiny", vocab_size=300), index, clm)


def test_a_tiny_model_overfits_one_batch():
    from encoderlab.model.presets import preset
    from encoderlab.model.transformer import TransformerLM
    from encoderlab.pretraining import objectives

    torch.manual_seed(0)
    model = TransformerLM(preset("tiny", vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2))
    model.init_weights(0)
    ids = torch.randint(4, 64, (4, 32))
    docs = torch.zeros_like(ids)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        sums = objectives.loss_sums(model, ids, docs, objectives.CLM(), objectives.Vocab(64, 3, (0, 1, 2, 3)), None)
        loss = sums.loss / sums.tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_every_shipped_config_validates_and_bases_merge(tmp_path):
    from pathlib import Path

    from encoderlab.core.config import load_yaml

    root = Path(__file__).resolve().parents[2] / "configs" / "pretrain"
    files = sorted(root.rglob("*.yaml"))
    assert len(files) >= 10
    for file in files:
        if file.name != "base.yaml":
            validate(PretrainConfig, load_yaml(file), str(file))
    split = load_yaml(root / "paper" / "610m-clm25-mlm40.yaml")
    assert split["objective"] == "clm:10000,mlm40:rest" and split["train"]["steps"] == 42000
    assert split["model"] == {"preset": "610m"} and split["optim"]["lr"] == 5e-4
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="includes itself"):
        load_yaml(tmp_path / "a.yaml")


def test_device_choice(tmp_path, packed_dir):
    cfg = make_config(tmp_path, packed_dir, steps=1, device="cpu")
    assert Trainer(cfg, show_progress=False).device.type == "cpu"
    with pytest.raises(ConfigError, match="train.device"):
        make_config(tmp_path, packed_dir, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(EncoderlabError, match="no CUDA device"):
            Trainer(make_config(tmp_path, packed_dir, name="gpu", steps=1, device="cuda"), show_progress=False)


def test_checkpoints_stand_alone(tmp_path, packed_dir):
    Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False).run()
    folder = checkpoint.latest(tmp_path / "run")  # one process writes the format of every world size
    assert (folder / "dcp" / ".metadata").exists() and not (folder / "optimizer.pt").exists()
    model, cfg, tok = checkpoint.load_model(tmp_path / "run")
    assert cfg.hidden_size == 32 and tok.vocab_size == cfg.vocab_size == 320 and tok.mask_id == cfg.mask_token_id
    for k, v in weights(tmp_path / "run", 2).items():
        torch.testing.assert_close(model.state_dict()[k], v, rtol=0, atol=0)


def test_checkpoints_of_an_older_encoderlab(tmp_path, packed_dir):
    """One written by FSDP2 (model and optimizer in dcp/) resumes; one with optimizer.pt is refused at resume, and
    its weights still serve fine-tuning and export."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    trainer = Trainer(make_config(tmp_path, packed_dir, steps=4, save_every=2), show_progress=False)
    trainer.run(stop_at=2)
    old = checkpoint.latest(tmp_path / "run")
    written_before_manifests(old)  # the older writers wrote no checksums
    shutil.rmtree(old / "dcp")
    dcp.save({"model": get_model_state_dict(trainer.model), "optim": get_optimizer_state_dict(trainer.model,
              trainer.optimizer)}, checkpoint_id=old / "dcp", no_dist=True)  # the keys the FSDP2 writer used
    resumed = Trainer(make_config(tmp_path, packed_dir, steps=4, save_every=2), show_progress=False, resume=True)
    assert resumed.step == 2
    for (_, a), (_, b) in zip(sorted(trainer.optimizer.state_dict()["state"].items()),
                              sorted(resumed.optimizer.state_dict()["state"].items())):
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    del resumed  # never run: dropping it releases the run folder's lock
    shutil.rmtree(old / "dcp")
    torch.save(trainer.optimizer.state_dict(), old / "optimizer.pt")  # the one-process writer's layout
    with pytest.raises(EncoderlabError, match=r"step-0000002 was written by an older encoderlab \(optimizer\.pt, "
                                              r"no dcp/.*\): it cannot be resumed .*init\.from_weights=.*step-0000002"):
        Trainer(make_config(tmp_path, packed_dir, steps=4, save_every=2), show_progress=False, resume=True)
    model, _, _ = checkpoint.load_model(old)
    for k, v in weights(tmp_path / "run", 2).items():
        torch.testing.assert_close(model.state_dict()[k], v, rtol=0, atol=0)


def test_weights_file_is_byte_reproducible(tmp_path, packed_dir):
    """The same weights give the same model.safetensors bytes, write after write (sha256 compares checkpoints)."""
    trainer = Trainer(make_config(tmp_path, packed_dir, steps=1), show_progress=False)
    tokenizer = trainer.train_data.root / "tokenizer"
    written = [checkpoint.save_weights_only(tmp_path / f"copy{i}", trainer.module.state_dict(), trainer.model_cfg,
                                            tokenizer, {"step": 3, "reason": "test"}) for i in range(8)]
    assert len({(path / "model.safetensors").read_bytes() for path in written}) == 1


def test_leftovers_of_killed_writes_and_prunes_never_block_a_resume(tmp_path, packed_dir):
    """A kill mid-prune (a step folder without state.json), mid-save (a .tmp folder) or mid-log (a cut last line of
    metrics.jsonl): the next --resume cleans up, says so, and ends with the weights of an uninterrupted run."""
    Trainer(make_config(tmp_path, packed_dir, name="straight", save_every=2, keep_checkpoints=1),
            show_progress=False).run()
    cfg = make_config(tmp_path, packed_dir, name="cut", save_every=2, keep_checkpoints=1)
    Trainer(cfg, show_progress=False).run(stop_at=5)
    run = tmp_path / "cut"
    assert checkpoint.latest(run).name == "step-0000004"
    half_deleted = run / "checkpoints" / "step-0000001"
    half_deleted.mkdir()
    (half_deleted / "model.safetensors").write_bytes(b"left by a kill while pruning")
    (run / "checkpoints" / ".step-0000006.tmp-x1y2").mkdir()
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "phase": "ml')  # a record cut short
    messages = []
    resumed = Trainer(make_config(tmp_path, packed_dir, name="cut", save_every=2, keep_checkpoints=1),
                      show_progress=False, resume=True, log=messages.append)
    assert any(".step-0000006.tmp-x1y2, step-0000001" in m for m in messages)
    resumed.run()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not [n for n in names if n.startswith(".")] and "step-0000001" not in names
    a, b = weights(tmp_path / "straight", 10), weights(run, 10)
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))


def test_a_kill_while_pruning_leaves_no_step_folder_without_its_state(tmp_path, packed_dir, monkeypatch):
    Trainer(make_config(tmp_path, packed_dir, steps=6, save_every=1, keep_checkpoints=2),
            show_progress=False).run(stop_at=2)

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt  # the process dies inside the deletion, after the rename

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.prune(tmp_path / "run", keep=1)
    left = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert all(n.startswith(".") or (tmp_path / "run" / "checkpoints" / n / "state.json").exists() for n in left)
    assert left[0].startswith(".step-0000001.deleting-")


def test_extend_a_finished_run_continues_it_exactly(tmp_path, packed_dir):
    """A finished run on a constant LR extended with a decay at its new end gives the weights and LRs of the new
    schedule trained straight; config.yaml stays the run's own, the extension is recorded beside it and is what
    later resumes are compared with; a plain --resume with more steps is refused."""
    constant = LRSchedule(kind="constant", warmup_steps=2)
    Trainer(make_config(tmp_path, packed_dir, name="straight"), show_progress=False).run()
    short = make_config(tmp_path, packed_dir, name="ext", steps=6).model_copy(update={"lr_schedule": constant})
    Trainer(short, show_progress=False).run()
    run = tmp_path / "ext"
    original = (run / "config.yaml").read_text()
    longer = make_config(tmp_path, packed_dir, name="ext", log_every=2)  # WSD over 10 steps; log_every is free
    with pytest.raises(EncoderlabError, match=r"lr_schedule.decay_steps: None -> 3, lr_schedule.kind: "
                                              r"'constant' -> 'wsd', train.steps: 6 -> 10; to train it further, pass"):
        Trainer(longer, show_progress=False, resume=True)
    messages = []
    Trainer(longer, show_progress=False, extend=True, log=messages.append).run()
    assert "extended" in messages[0] and "from step-0000006 (step 6) to 10 steps" in messages[0]
    a, b = weights(tmp_path / "straight", 10), weights(run, 10)
    assert all(torch.equal(a[k], b[k]) for k in a)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6, 8, 10]
    assert [r["lr"] for r in records] == pytest.approx(
        [longer.optim.lr * longer.lr_schedule.factor(r["step"] - 1, 10) for r in records], rel=0, abs=1e-15)
    assert (run / "config.yaml").read_text() == original
    assert validate(PretrainConfig, yaml.safe_load((run / "config.extend-0000006.yaml").read_text()), "t") == longer
    del messages[:]
    Trainer(longer, show_progress=False, resume=True, log=messages.append).run()  # the newest definition
    assert messages[0].startswith(f"resumed {run} from step-0000010")
    with pytest.raises(EncoderlabError, match=r"train.steps: 10 -> 6"):
        Trainer(short, show_progress=False, resume=True)


def test_resume_compares_the_data_by_content(tmp_path, packed_dir):
    """Moved data (another path, the same content) resumes; data of other content is refused, whatever its path."""
    Trainer(make_config(tmp_path, packed_dir, steps=4, save_every=2), show_progress=False).run(stop_at=2)
    moved = tmp_path / "moved"
    shutil.copytree(packed_dir, moved)
    cfg = make_config(tmp_path, packed_dir, steps=4, save_every=2)
    resumed = Trainer(cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": str(moved)})}),
                      show_progress=False, resume=True)
    assert resumed.step == 2
    del resumed
    meta = json.loads((moved / "meta.json").read_text())
    meta["splits"]["train"]["shards"][0]["sha256"]["tokens"] = "0" * 64  # what other tokens of that size record
    (moved / "meta.json").write_text(json.dumps(meta))
    changed = rf"data.path \(other content than the run trained on\): '{packed_dir}' -> '{moved}'"
    with pytest.raises(EncoderlabError, match=changed):
        Trainer(cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": str(moved)})}),
                show_progress=False, resume=True)


def test_every_reader_of_metrics_drops_a_torn_last_line_and_refuses_a_damaged_one(tmp_path):
    """One reader for the resume, the study report and the model card: a kill mid-write is no reason to fail."""
    from encoderlab.runs.logging import read_metrics

    path = tmp_path / "metrics.jsonl"
    assert read_metrics(path) == []
    path.write_text('{"step": 1, "tokens": 8}\n{"step": 2, "tokens": 16}\n{"step": 3, "tok')
    assert read_metrics(path) == [{"step": 1, "tokens": 8}, {"step": 2, "tokens": 16}]
    path.write_text('{"step": 1, "tokens": 8}\n{"step": 2, "to\n{"step": 3, "tokens": 24}\n')
    with pytest.raises(EncoderlabError, match="record 2 is not JSON"):
        read_metrics(path)
    # Bytes that are not UTF-8 (they used to raise UnicodeDecodeError): a damaged record, or a torn last one.
    path.write_bytes(b'{"step": 1, "tokens": 8}\n\xff\xfe\x00\n{"step": 3, "tokens": 24}\n')
    with pytest.raises(EncoderlabError, match="record 2 is not JSON"):
        read_metrics(path)
    path.write_bytes(b'{"step": 1, "tokens": 8}\n{"step": 2, "tok\xe2\x82')
    assert read_metrics(path) == [{"step": 1, "tokens": 8}]


def test_a_run_without_latest_continues_from_its_newest_complete_checkpoint(tmp_path, packed_dir):
    """LATEST lost (a kill before the first one was written, or a hand): the run continues from its newest complete
    checkpoint, never starts again over it, and a new run there is refused."""
    Trainer(make_config(tmp_path, packed_dir, steps=6, save_every=2), show_progress=False).run()
    (tmp_path / "run" / "LATEST").unlink()
    said: list[str] = []
    again = Trainer(make_config(tmp_path, packed_dir, steps=6, save_every=2), resume=True, log=said.append,
                    show_progress=False)
    assert again.step == 6 and any("LATEST is missing: continuing from the newest complete checkpoint, "
                                   "step-0000006" in s for s in said)
    again._lock.close()
    with pytest.raises(EncoderlabError, match="already holds a run"):
        Trainer(make_config(tmp_path, packed_dir, steps=6, save_every=2), show_progress=False)


def test_resuming_a_finished_run_keeps_its_final_numbers(tmp_path, packed_dir):
    first = Trainer(make_config(tmp_path, packed_dir, steps=4), show_progress=False).run()
    said: list[str] = []
    again = Trainer(make_config(tmp_path, packed_dir, steps=4), resume=True, log=said.append, show_progress=False).run()
    assert again["final"] == first["final"] and "val/loss" in str(again["final"])
    assert any("had already trained its 4 steps" in s for s in said)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final"] == first["final"]


def test_continued_pretraining_refuses_another_tokenizers_data_and_notes_another_architecture(tmp_path, packed_dir):
    from encoderlab.data.loader import resolve_data
    from encoderlab.data.tokenizer import train_bpe
    from encoderlab.pretraining.setup import check_source, model_config

    Trainer(make_config(tmp_path, packed_dir, steps=2), show_progress=False).run()
    source = tmp_path / "run" / "checkpoints" / "step-0000002"
    data = resolve_data(str(packed_dir))
    meta = json.loads((data / "meta.json").read_text())

    def cpt(**model):
        cfg = validate(PretrainConfig, {**make_config(tmp_path, packed_dir, name="cpt", steps=2).model_dump(
            mode="json"), "init": {"from_weights": str(source)}, "model": {**TINY, **model}}, "test")
        return check_source(cfg, model_config(cfg, meta["tokenizer"]), data)

    assert cpt() == []  # the same model on data packed with its own tokenizer
    assert cpt(rope_theta=123.0) == [f"model.rope_theta is 123.0 here but 10000.0 in {source} (init.from_weights): "
                                     "this run continues another model than the one it starts from"]
    other = train_bpe(["a different corpus of words"] * 50, vocab_size=300)
    other.save(source / "tokenizer")  # the checkpoint's tokenizer is another one than the data was packed with
    with pytest.raises(EncoderlabError, match=rf"init.from_weights {source}: the data \(.*\) was packed with another "
                                              r"tokenizer: token .* differ\), so each id would read another token"):
        cpt()


def test_ctrl_c_while_a_checkpoint_is_written_stays_an_interrupt(tmp_path, packed_dir, monkeypatch):
    """DCP wraps what stops its save (Ctrl-C too) in its CheckpointException: the command must still see an
    interrupt (a line saying how to resume, exit 130), not a traceback; the unfinished checkpoint is not named."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(FileSystemWriter, "write_data", interrupted)
    trainer = Trainer(make_config(tmp_path, packed_dir, steps=4, save_every=2), show_progress=False)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert trainer.step == 2 and checkpoint.latest(tmp_path / "run") is None


def test_a_misspelled_override_is_blamed_and_its_close_match_suggested():
    """`--set trian.steps=20` made the section `trian`: the override is named as typed, not the file it overrode,
    with the name it was close to and what the section takes."""
    data = {"train": {"steps": 1, "global_batch": 2}}
    with pytest.raises(ConfigError, match=r"^--set trian\.steps=20: trian: unknown key \(did you mean 'train'\?; "
                                          r"allowed: data, init, .*train\)$"):
        validate(PretrainConfig, apply_overrides(copy.deepcopy(data), ["trian.steps=20"]), "x.yaml", ["trian.steps=20"])
    with pytest.raises(ConfigError, match=r"^--set train\.stpes=20: train\.stpes: unknown key \(did you mean "
                                          r"'train\.steps'\?; allowed in train: .*steps"):
        validate(PretrainConfig, apply_overrides(copy.deepcopy(data), ["train.stpes=20"]), "x.yaml", ["train.stpes=20"])
    with pytest.raises(ConfigError, match=r"^x\.yaml: trian: unknown key \(did you mean 'train'\?; allowed: "):
        validate(PretrainConfig, {**data, "trian": {"steps": 1}}, "x.yaml", ["train.steps=3"])  # the file's typo
    with pytest.raises(ConfigError, match=r"^x\.yaml: zzz: unknown key \(allowed: data, "):  # nothing close: no guess
        validate(PretrainConfig, {**data, "zzz": 1}, "x.yaml")


def test_a_misspelled_model_key_is_blamed_on_its_override_not_on_the_preset():
    """`--set model.hiden_size=64` passed the config (the model section takes the fields of its preset) and was
    refused once the preset was built, as `model (preset 'tiny'): hiden_size: ...`: the override is named, as for
    any other section, with what the model section takes."""
    data = {"model": {"preset": "tiny"}, "train": {"steps": 10_000, "global_batch": 2}}
    with pytest.raises(ConfigError, match=r"^--set model\.hiden_size=64: model\.hiden_size: unknown key \(did you "
                                          r"mean 'model\.hidden_size'\?; allowed in model: attention_bias, .*preset, "):
        validate(PretrainConfig, apply_overrides(copy.deepcopy(data), ["model.hiden_size=64"]), "x.yaml",
                 ["model.hiden_size=64"])
    with pytest.raises(ConfigError, match=r"^x\.yaml: model\.hiden_size: unknown key \(did you mean"):
        validate(PretrainConfig, {**data, "model": {"hiden_size": 64}}, "x.yaml")  # the file's typo
    assert validate(PretrainConfig, {**data, "model": {"hidden_size": 64}}, "x.yaml").model.model_extra == {
        "hidden_size": 64}


def test_a_model_shape_across_keys_is_blamed_on_the_field_set_not_on_the_preset():
    """`--set model.num_attention_heads=3` on preset tiny (hidden 256) was refused once the data was read, as
    `model (preset 'tiny'): hidden_size=256 must be divisible by num_attention_heads=3`: the preset was blamed for
    the user's value. The preset with the model fields set is checked with the config, so the refusal names the
    override (or the file) that set the field."""
    data = {"model": {"preset": "tiny"}, "train": {"steps": 10_000, "global_batch": 2}}

    def refused(model: dict, sets: list[str] = ()) -> str:
        with pytest.raises(ConfigError) as caught:
            validate(PretrainConfig, apply_overrides(copy.deepcopy({**data, "model": model}), sets), "x.yaml", sets)
        return str(caught.value)

    assert re.fullmatch(r"--set model\.num_attention_heads=3: model\.num_attention_heads: with preset 'tiny', "
                        r"hidden_size=256 must be divisible by num_attention_heads=3 \(allowed head counts for this "
                        r"width: \[1, 2, 4, 8, 16, 32, 64, 128, 256\]\)",
                        refused({"preset": "tiny"}, ["model.num_attention_heads=3"]))
    both = refused({"preset": "tiny"}, ["model.hidden_size=250", "model.num_attention_heads=3"])
    assert both.startswith("--set model.hidden_size=250: model.hidden_size: with preset 'tiny', hidden_size=250 ")
    assert both.endswith(" (model.num_attention_heads=3 from --set)")
    assert refused({"preset": "tiny", "num_attention_heads": 3}).startswith(
        "x.yaml: model.num_attention_heads: with preset 'tiny', hidden_size=256 must be divisible")
    assert refused({"vocab_size": 100, "mask_token_id": 100}) == (
        "x.yaml: model.mask_token_id: with preset 'tiny', mask_token_id=100 is outside the vocabulary "
        "(vocab_size=100)")
    # without a vocabulary here, the special ids are checked against the data's, once it is read
    assert validate(PretrainConfig, {**data, "model": {"mask_token_id": 9000}}, "x.yaml").model.model_extra == {
        "mask_token_id": 9000}


def test_an_odd_head_width_is_blamed_on_the_field_set():
    """The rotary check said `head_dim = 7 must be even`, a form the blame did not read as naming a key: the file
    was blamed (`x.yaml: model: ...`), and a head width of hidden_size / num_attention_heads was called head_dim,
    which the user never set. It names the fields it comes from, and the refusal the override that set one."""
    data = {"model": {"preset": "tiny"}, "train": {"steps": 10_000, "global_batch": 2}}

    def refused(sets: list[str]) -> str:
        with pytest.raises(ConfigError) as caught:
            validate(PretrainConfig, apply_overrides(copy.deepcopy(data), sets), "x.yaml", sets)
        return str(caught.value)

    assert refused(["model.head_dim=7"]) == (
        "--set model.head_dim=7: model.head_dim: with preset 'tiny', head_dim=7 must be even for rotary embeddings")
    assert refused(["model.hidden_size=36"]) == (
        "--set model.hidden_size=36: model.hidden_size: with preset 'tiny', hidden_size=36 / num_attention_heads=4 "
        "makes heads 9 wide, which must be even for rotary embeddings (head counts that give even heads at this "
        "width: [1, 2, 3, 6, 9, 18]; or set head_dim)")


def test_a_top_level_key_that_one_section_takes_is_suggested_there():
    """`--set lr=1e-3` said only what the top level takes: `lr` is a key of one section, `optim`. A key of two
    sections (`seed`: data's and train's) has no one guess."""
    def refused(override):
        validate(PretrainConfig, apply_overrides({"train": {"steps": 1, "global_batch": 2}}, [override]), "x.yaml",
                 [override])

    with pytest.raises(ConfigError, match=r"^--set lr=1e-3: lr: unknown key \(did you mean 'optim\.lr'\?; allowed: "):
        refused("lr=1e-3")
    with pytest.raises(ConfigError, match=r"^--set hidden_size=8: hidden_size: unknown key \(did you mean "
                                          r"'model\.hidden_size'\?; "):
        refused("hidden_size=8")
    with pytest.raises(ConfigError, match=r"^--set seed=1: seed: unknown key \(allowed: data, "):
        refused("seed=1")
