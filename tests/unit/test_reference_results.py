"""The paper authors' per-run results (tests/fixtures/encodeval-results-610m-42k: their SC and IR runs of two
released models) read and aggregated by encoderlab's own code: per seed they give the published category means,
one LR per dataset does not; the reader says what is missing and refuses what is malformed; the report shows them
beside a study's models."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import write_json
from encoderlab.finetuning import records
from encoderlab.study.reference import load_reference, reference_section
from encoderlab.study.report import Report

FIXTURE = Path(__file__).parents[1] / "fixtures" / "encodeval-results-610m-42k"
MLM, CLM = "610m-mlm40-42k", "610m-clm-42k"


def category(model: str, cat: str, lr_choice: str, root: Path = FIXTURE) -> str:
    return f"{load_reference(root, model, lr_choice).categories[cat].mean:.2f}"


def test_per_seed_gives_the_published_category_means():
    # published: SC 87.00 (MLM 40%) and 83.58 (CLM), IR 79.55 (MLM 40%)
    assert category(MLM, "SC", "per_seed") == "87.00" and category(CLM, "SC", "per_seed") == "83.58"
    assert category(MLM, "IR", "per_seed") == "79.55"
    # CLM's IR is published as 76.20; these runs give 76.08 under either rule (see the CLM IR test below)
    assert category(CLM, "IR", "per_seed") == "76.08"


def test_one_lr_per_dataset_gives_other_numbers():
    assert category(MLM, "SC", "mean_over_seeds") == "87.10" and category(CLM, "SC", "mean_over_seeds") == "83.57"
    assert category(MLM, "IR", "mean_over_seeds") == "79.60" and category(CLM, "IR", "mean_over_seeds") == "76.08"


def test_a_dataset_is_the_mean_of_each_seeds_kept_test_score():
    ref = load_reference(FIXTURE, CLM, "per_seed")
    sst2 = ref.tasks["sst2"]  # seed 3's best validation is lr 1e-4 (92.99 vs 92.04), the others' 5e-5
    assert sst2.lr_by_seed == {0: 5e-5, 1: 5e-5, 2: 5e-5, 3: 1e-4, 4: 5e-5}
    tests = [0.9094036697247706, 0.9094036697247706, 0.9071100917431193, 0.9105504587155964, 0.9185779816513762]
    assert sst2.test == round(100 * sum(tests) / 5, 3) == 91.101
    # the authors' folder names map to encoderlab's tasks, and every IR set is its own dataset
    assert set(ref.tasks) == {"sst2", "mnli", "qqp", "msmarco", "nq", "mldr"} and ref.tasks["mnli"].category == "SC"


def test_clm_ir_is_not_a_matter_of_close_validation_ties():
    """No LR choice over these runs reaches the published 76.20: even keeping each seed's best *test* score gives
    76.09, 0.11 short. The closest validation calls (MLDR seed 3: 5e-5 by 0.38 points; seed 0: 2e-5 by 0.63) move
    the category by less than 0.01 either way; MS MARCO and NQ keep 5e-5 for every seed."""
    ref = load_reference(FIXTURE, CLM, "per_seed")
    assert ref.tasks["mldr"].lr_by_seed == {0: 2e-5, 1: 5e-5, 2: 5e-5, 3: 5e-5, 4: 2e-5}
    assert set(ref.tasks["msmarco"].lr_by_seed.values()) == set(ref.tasks["nq"].lr_by_seed.values()) == {5e-5}
    # mldr's seed tests 53.243, 53.621, 53.585, 52.801, 52.530 -> 53.156; msmarco 89.883; nq 85.211 -> 76.083
    assert ref.tasks["mldr"].test == 53.156 and ref.categories["IR"].mean == pytest.approx(76.0836, abs=1e-4)


def copy_runs(tmp_path: Path, *datasets: str) -> Path:
    root = tmp_path / "results"
    for d in datasets:
        shutil.copytree(FIXTURE / CLM / d, root / CLM / d)
    return root


def test_files_with_per_example_scores_other_names_and_missing_runs(tmp_path):
    root = copy_runs(tmp_path, "SC/sst2", "SC/qqp")
    run = root / CLM / "SC" / "sst2" / "lr5e-05_sd0" / "results.json"
    data = json.loads(run.read_text())
    run.write_text(json.dumps({s: {**v, "scores_i": [1.0, 0.0]} for s, v in data.items()}))  # as the originals
    (root / CLM / "SC" / "qqp").rename(root / CLM / "SC" / "qqp-renamed")
    shutil.copytree(root / CLM / "SC" / "sst2", root / CLM / "QA" / "qed")
    (root / CLM / "SC" / "sst2" / "lr1e-05_sd0").mkdir()  # a run that never wrote its results
    ref = load_reference(root, CLM, "per_seed")
    assert ref.tasks["sst2"].test == 91.101 and set(ref.tasks) == {"sst2"}
    assert ref.notes == ["QA/qed: skipped (not a dataset of the paper's category means)",
                         "SC/qqp-renamed: skipped (not a dataset of the paper's category means)",
                         "SC/sst2: 4 of 10 runs (2 LRs x 5 seeds) missing (aggregated without them)"]
    # encoderlab's own task names read the same as the authors'
    (root / CLM / "SC" / "sst2").rename(root / CLM / "SC" / "mnli")
    assert set(load_reference(root, CLM, "per_seed").tasks) == {"mnli"}


@pytest.mark.parametrize("content, says", [
    ("{not json", "not valid JSON"),
    ('{"validation": {"score": 0.5}}', "no validation.score and test.score"),
    ('{"validation": {"score": 0.5}, "test": {"score": "0.9"}}', "must be numbers"),
    ('[0.5, 0.9]', "no validation.score and test.score"),
])
def test_a_malformed_file_is_refused_naming_it(tmp_path, content, says):
    root = copy_runs(tmp_path, "SC/sst2")
    bad = root / CLM / "SC" / "sst2" / "lr5e-05_sd2" / "results.json"
    bad.write_text(content)
    with pytest.raises(EncoderlabError, match=says) as err:
        load_reference(root, CLM, "per_seed")
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_a_bad_run_folder_or_model_is_refused(tmp_path):
    root = copy_runs(tmp_path, "SC/sst2")
    (root / CLM / "SC" / "sst2" / "lr5e-05_sd0").rename(root / CLM / "SC" / "sst2" / "best")
    with pytest.raises(EncoderlabError, match=r"best: a run folder is named lr<LR>_sd<SEED>"):
        load_reference(root, CLM, "per_seed")
    with pytest.raises(EncoderlabError, match=f"no model '1b-clm-42k' in {root} .*e.g. {CLM}"):
        load_reference(root, "1b-clm-42k", "per_seed")


def study(tmp_path: Path, lr_choice: str) -> Path:
    """A study of one model named as the authors' CLM model: sst2 at 80 + seed, 'standard' 70 + seed."""
    protocol = {"name": "t", "lrs": [1e-4], "seeds": [0, 1, 2], "max_steps": 4, "lr_choice": lr_choice}
    root = tmp_path / "study"
    root.mkdir()
    write_json(root / "plan.json", {"study": "s", "budget": 1, "protocol": protocol, "runs": [], "evaluations": [
        {"label": CLM, "model": CLM, "step": 1, "kind": "final", "size": "610m", "tag": "tag"}]})
    for seed in protocol["seeds"]:
        records.write(records.record_path(root / "evals", "tag", records.protocol_key(protocol), "sst2", "0" * 16,
                                          1e-4, seed), {
            "task": "sst2", "tag": "tag", "fingerprint": "0" * 16, "protocol": protocol,
            "family": "classification", "metric": "accuracy", "status": "ok", "lr": 1e-4,
            "seed": seed, "baseline": {"test": {"score": 50.0, "standard": 50.0}},
            "scores": {s: {"score": 80.0 + seed, "standard": 70.0 + seed} for s in ("validation", "test")}})
    return root


def test_the_report_shows_the_authors_runs_beside_the_study_model_of_the_same_name(tmp_path):
    root = study(tmp_path, "per_seed")
    text = reference_section(Report(root, reference=FIXTURE))
    rows = [line for line in text.splitlines() if line.startswith("| 610m")]
    assert rows[0].startswith(f"| {CLM} | authors' runs | 83.58 ± 0.24 | - | - | 76.08 ± 0.80 |")
    assert rows[1] == f"| {CLM} | this study | 81.00 ± 2.48 | - | - | - |"  # 80, 81, 82: t(0.975, 2) x 1 / sqrt 3
    assert "`lr_choice: per_seed`" in text and f"- {CLM}: SC/mnli_m: 15 of 20 runs" in text
    # any of the authors' models beside any of ours, or alone
    text = reference_section(Report(root, reference=FIXTURE, reference_models=(f"{CLM}={MLM}", MLM)))
    assert [line.split(" | ")[:3] for line in text.splitlines() if line.startswith("| 610m")] == [
        [f"| {MLM}", "authors' runs", "87.00 ± 0.26"], [f"| {CLM}", "this study", "81.00 ± 2.48"],
        [f"| {MLM}", "authors' runs", "87.00 ± 0.26"]]
    with pytest.raises(EncoderlabError, match="'610m-x' is no evaluation of this study"):
        reference_section(Report(root, reference=FIXTURE, reference_models=(f"610m-x={MLM}",)))
    # the study ran sst2 alone where the authors' SC averages three datasets: the cell is said not to compare
    assert f"- SC: {MLM} averages mnli, qqp, sst2, {CLM} averages sst2: other datasets" in text
    (tmp_path / "runs" / "m").mkdir(parents=True)  # a folder, but no results tree in it
    with pytest.raises(EncoderlabError, match="no MODEL/TASK/DATASET/RUN/results.json in it"):
        reference_section(Report(root, reference=tmp_path / "runs"))


def test_every_table_says_its_metric_and_lr_rule(tmp_path):
    root = study(tmp_path, "mean_over_seeds")
    report = Report(root, metric="standard")
    table = report.dataset_tables([CLM])
    assert f"| {CLM} | 71.00 ± 2.48 (lr 0.0001; +21.00 vs majority class) |" in table and "sst2 (accuracy)" in table
    assert "the field's standard metric (`standard`" in table and "`lr_choice: mean_over_seeds`" in table
    assert "the protocol's metric (`score`" in Report(root).category_table([CLM], "c", "title")
