"""configs/studies/paper.yaml is the paper: it plans exactly the released models and intermediate checkpoints
(configs/studies/paper-released.yaml), and the single-model presets in configs/pretrain/paper/ train what it trains."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_command

from encoderlab.core.config import load_yaml
from encoderlab.pretraining import objectives
from encoderlab.study.plan import build_plan
from encoderlab.study.spec import load_study

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STUDY = CONFIGS / "studies" / "paper.yaml"


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """What `encoderlab study plan configs/studies/paper.yaml --json` prints (the data is not prepared here)."""
    cwd = tmp_path_factory.mktemp("plan")
    proc = subprocess.run([sys.executable, "-m", "encoderlab.cli", "study", "plan", str(STUDY), "--json"], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ENCODERLAB_HOME": str(cwd / "home")})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_paper_study_plans_exactly_the_released_grid(planned):
    released = load_yaml(STUDY.parent / "paper-released.yaml")
    assert len(released["models"]) == 38 and len(released["intermediate"]) == 12  # docs/paper.md#the-released-grid
    kinds: dict[str, list[str]] = {}
    for e in planned["evaluations"]:
        kinds.setdefault(e["kind"], []).append(e["label"])
    models, inter = kinds.pop("final"), kinds.pop("intermediate")
    assert sorted(models) == sorted(set(models)) and sorted(inter) == sorted(set(inter))
    assert {"missing": sorted(set(released["models"]) - set(models)),
            "not released": sorted(set(models) - set(released["models"]))} == {"missing": [], "not released": []}
    assert {"missing": sorted(set(released["intermediate"]) - set(inter)),
            "not released": sorted(set(inter) - set(released["intermediate"]))} == {"missing": [], "not released": []}
    assert kinds == {"random": ["610m-random"]}  # the one extra, labelled as such
    # One retrieval model per (checkpoint, LR, seed), scored on every IR set: 50 checkpoints x 10 trainings x 30.
    assert planned["finetuning_runs"] - planned["baseline_finetuning_runs"] == 15_000
    assert sorted(r["name"] for r in planned["runs"]) == sorted(models)  # every run folder is a released model
    published = load_yaml(STUDY.parent / "paper-results.yaml")["categories"]
    assert set(published) <= set(released["models"]) | set(released["intermediate"])  # beside the model that made it
    assert published["610m-clm-21k-mlm40-42k"]["QA"] == 59.51 and published["610m-clm-32k-mlm40-42k"]["QA"] == 61.41


def test_the_paper_grid_shares_its_trunks_at_the_released_switches(planned):
    runs = {r["name"]: r for r in planned["runs"]}
    for rate in (20, 30, 40, 50):  # MLM only in the decay: branches of the CLM trunk where its decay would start
        assert runs[f"610m-clm-40k-mlm{rate}-42k"]["from"] == "610m-clm-42k@40000"
    for budget, switches in ((12, (3, 6, 9)), (22, (5, 11, 17)), (42, (10, 21, 32))):
        for k in switches:
            run = runs[f"610m-clm-{k}k-mlm40-{budget}k"]
            assert run["objective"] == f"clm:{k * 1000},mlm40:rest" and run["steps"] == budget * 1000
            assert run["from"] == f"610m-clm-42k@{k * 1000}"
    for obj in ("clm", "mlm40"):  # the shorter budgets branch off the 42K trunks at their own decay start
        assert runs[f"610m-{obj}-12k"]["from"] == f"610m-{obj}-42k@10000"
        assert runs[f"610m-{obj}-22k"]["from"] == f"610m-{obj}-42k@20000"


def test_single_model_presets_agree_with_the_study():
    spec, base = load_study(STUDY)
    plan = build_plan(spec, base)
    presets = sorted(p for p in (CONFIGS / "pretrain" / "paper").glob("*.yaml") if p.name != "base.yaml")
    assert len(presets) >= 10
    for path in presets:
        preset = load_yaml(path)
        assert preset["name"] in plan.runs, f"{path.name}: {preset['name']} is not a model of paper.yaml"
        run = plan.runs[preset["name"]]
        study = plan.config(run)
        steps = preset["train"]["steps"]
        assert steps == run.steps, path.name
        ours = objectives.Schedule.parse(preset["objective"]).phases(steps)
        theirs = objectives.Schedule.parse(study["objective"]).phases(steps)
        assert [(p.objective, p.start, p.end) for p in ours] == [(p.objective, p.start, p.end) for p in theirs], \
            path.name
        for key in ("model", "optim", "lr_schedule", "data"):
            assert preset[key] == study[key], (path.name, key)
        for key in ("global_batch_tokens", "micro_batch", "dtype"):
            assert preset["train"][key] == study["train"][key], (path.name, key)
        if run.init:  # CPT: from the decayed model of the study's run of that name
            assert Path(preset["init"]["from_weights"]).name == run.init, path.name


def test_a_study_plans_before_the_offline_data_is_prepared(monkeypatch, capsys, tmp_path):
    """`study plan` runs `study run`'s checks of the tasks, but takes offline task names on trust while none is
    prepared: a plan is what one reads before deciding to prepare or run anything (cpt-smollm2.yaml gives its
    data_shape and evaluates offline tasks)."""
    monkeypatch.chdir(tmp_path)
    study = STUDY.parent / "cpt-smollm2.yaml"
    code, out, err = run_command(monkeypatch, capsys, "study", "plan", study, home=tmp_path / "home")
    assert code == 0, err
    assert "evaluation" in out and not (tmp_path / "home" / "data").exists()
