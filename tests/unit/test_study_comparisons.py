"""A study reports the comparisons its file declares, whatever its models are: two masking rates get their own
sections (A vs B with its interval, stability, data efficiency, a CPT pair), each verdict agreeing with its interval,
and not a word of the paper's findings; a name the study does not evaluate is refused when it is planned."""
from __future__ import annotations

import re

import pytest
import yaml
from test_study_verdicts import RANDOM, flat, write_study

from encoderlab.core.config import ConfigError, validate
from encoderlab.core.io import read_json, write_json
from encoderlab.study.compare import A_HIGHER, B_HIGHER, NO_DIFFERENCE, PAIR_RULE
from encoderlab.study.comparisons import SAME_SPREAD, SPREAD_RULE
from encoderlab.study.plan import build_plan
from encoderlab.study.report import write_report
from encoderlab.study.spec import StudySpec, load_study

MLM20, MLM40, CPT = "micro-mlm20-20", "micro-mlm40-20", "micro-mlm40-dec20-mlm20-26"
ROW = re.compile(r"^\| (\w\w(?: at [\d,]+)?) \| [\d.]+ \| [\d.]+ \| ([+-][\d.]+) \| ± ([\d.]+) \| [\d.]+ \| [\d.]+ \| "
                 r"([^|]+) \|")
DECLARED = [{"versus": [MLM40, MLM20]}, {"stability": [MLM40, MLM20]}, {"efficiency": [MLM20, MLM40]},
            {"cpt": CPT, "title": "MLM 20% after MLM 40%"}, {"stability": [CPT, MLM40]}]


def masking_study(root, comparisons: list[dict], findings: str | None = None):
    """MLM 40% ten points above MLM 20% in every category and steadier (seeds 1 point apart against 3), both at
    steps 8 and 20, a CPT of the MLM 40% model, a random-init baseline; plan.json as the planner writes it, with its
    spec."""
    levels = {MLM20: flat(50.0), MLM40: flat(60.0), f"{MLM20}-8": flat(40.0), f"{MLM40}-8": flat(45.0),
              CPT: flat(61.0), RANDOM: flat(30.0)}
    write_study(root, levels, spread={MLM20: 3.0, MLM40: 1.0})
    plan = read_json(root / "plan.json", "written by write_study")
    model = {"size": "micro", "kind": "model", "steps": 20, "init": None, "tokens_per_step": 4096}
    plan["runs"] = [{**model, "name": MLM20, "schedule": [["mlm20", 0]]},
                    {**model, "name": MLM40, "schedule": [["mlm40", 0]]},
                    {**model, "name": CPT, "kind": "cpt", "steps": 6, "init": MLM40, "schedule": [["mlm20", 0]]}]
    kinds = {MLM20: ("final", MLM20, 20), MLM40: ("final", MLM40, 20), f"{MLM20}-8": ("intermediate", MLM20, 8),
             f"{MLM40}-8": ("intermediate", MLM40, 8), CPT: ("final", CPT, 6), RANDOM: ("random", RANDOM, 0)}
    plan["evaluations"] = [{"label": lb, "model": m, "step": s, "kind": k, "size": "micro", "tag": f"tag-{lb}"}
                           for lb, (k, m, s) in kinds.items()]
    plan["spec"] = {"name": "masking", "comparisons": comparisons, "findings": findings}
    plan["summary"] = {"steps": 46, "naive_steps": 66, "flops": 1e12, "naive_flops": 2e12}
    write_json(root / "plan.json", plan)
    return write_report(root).read_text()


def section(text: str, number: int) -> str:
    return text.split(f"\n### {number}. ")[1].split("\n### ")[0].split("\n## ")[0]


def rows(text: str) -> list[tuple[str, float, float, str]]:
    return [(m[1], float(m[2]), float(m[3]), m[4].strip()) for m in map(ROW.match, text.splitlines()) if m]


def test_two_masking_rates_get_their_own_comparisons_and_none_of_the_papers(tmp_path):
    text = masking_study(tmp_path, DECLARED)
    body = text.split("\n", 2)[2]  # past the line naming the study folder
    assert "paper" not in body.lower() and "finding 3" not in body.lower() and "## Pairwise comparisons" not in body
    assert "## Sanity check: pretraining beats random initialisation" in body  # a random-init model ran
    versus = section(text, 1)
    assert versus.startswith(f"{MLM40} vs {MLM20}\n\n{PAIR_RULE}\n\n")
    assert f"**A = {MLM40}, B = {MLM20}**: A higher in 4 of 4 categories." in versus
    assert f"**A = {MLM40}, B = {MLM20}**: A steadier in 4 of 4 categories." in section(text, 2)
    assert SPREAD_RULE in section(text, 2)
    assert f"**A = {CPT}, B = {MLM40}**: {SAME_SPREAD} in 4 of 4 categories." in section(text, 5)  # equal spreads
    efficiency = section(text, 3)
    assert f"| {MLM20}-8 (step 8) |" in efficiency and f"| {MLM40} (step 20) |" in efficiency
    assert f"**A = {MLM20}, B = {MLM40}**: B higher in 8 of 8 step x category comparisons." in efficiency
    assert {r[0] for r in rows(efficiency)} == {f"{c} at {s}" for c in ("SC", "TC", "QA", "IR") for s in (8, 20)}
    cpt = section(text, 4)
    assert cpt.startswith("MLM 20% after MLM 40%\n") and f"**A = {CPT}, B = {MLM40}**: " in cpt
    assert (tmp_path / "report" / "efficiency-3.csv").exists()


def test_every_declared_verdict_agrees_with_its_interval(tmp_path):
    """The word of each row is the side its 95% interval lies on, or no difference where it includes zero."""
    text = masking_study(tmp_path, DECLARED)
    seen = set()
    for number in (1, 3, 4):
        for category, diff, ci, word in rows(section(text, number)):
            expected = A_HIGHER if diff - ci > 0 else B_HIGHER if diff + ci < 0 else NO_DIFFERENCE
            assert word == expected, (number, category, diff, ci, word)
            seen.add(word)
    assert seen == {A_HIGHER, B_HIGHER, NO_DIFFERENCE}  # CPT: +1.00 against an interval of ± 2.63


def test_a_study_that_declares_nothing_says_what_it_can(tmp_path):
    """No comparisons and no findings: the sanity check, every pair of its models, the tables; nothing of the
    paper. The same study with `findings: paper` judges the paper's findings, whose MLM arm is MLM 40%."""
    body = masking_study(tmp_path / "none", []).split("\n", 2)[2]
    assert "paper" not in body.lower() and "## The study's comparisons" not in body
    assert "## Sanity check" in body and f"**A = {MLM20}, B = {MLM40}**: B higher in 4 of 4" in body
    paper = masking_study(tmp_path / "paper", [], findings="paper")
    assert "## The paper's five findings at this scale" in paper
    assert f"**1. MLM beats CLM on most tasks** (A = {MLM40}" in paper
    assert "not asked by this study: it trains no full-budget CLM and MLM models" in paper


def study_file(tmp_path, comparisons: list[dict]):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": "nowhere"}, "model": {"preset": "micro"},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 2, "decay_steps": 4},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32"}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({"name": "t", "lrs": [1e-3], "seeds": [0, 1]}))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "masking", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml", "budget": 20,
        "models": [{"sizes": ["micro"], "objectives": ["mlm20", "mlm40"]}], "intermediate": {"steps": [8]},
        "evaluation": {"protocol": "protocol.yaml", "tasks": ["rt-polarity"]}, "comparisons": comparisons,
        "data_shape": {"vocab_size": 320, "seq_len": 64}}))
    return load_study(tmp_path / "study.yaml")


def test_a_comparison_of_a_model_the_study_does_not_evaluate_is_refused_when_planned(tmp_path):
    plan = build_plan(*study_file(tmp_path / "ok", [{"versus": ["micro-mlm40-20", "micro-mlm20-20@8"]},
                                                    {"efficiency": ["micro-mlm20-20", "micro-mlm40-20"]}]))
    assert [c.kind for c in plan.spec.comparisons] == ["versus", "efficiency"]
    for comparisons, message in (
            ([{"versus": ["micro-mlm40-20", "micro-mlm30-20"]}], "comparisons.0.versus: 'micro-mlm30-20' names no "
             "evaluated model (an evaluation label, or RUN@STEP at an evaluated step) (allowed: micro-mlm20-20, "),
            ([{"versus": ["micro-mlm40-20@9", "micro-mlm20-20"]}], "'micro-mlm40-20@9' names no evaluated model"),
            ([{"efficiency": ["micro-mlm40-20-8"]}], "comparisons.0.efficiency: 'micro-mlm40-20-8' names no run "
             "with evaluated checkpoints (allowed: micro-mlm20-20, micro-mlm40-20)"),
            ([{"cpt": "micro-mlm40-20"}], "comparisons.0.cpt: 'micro-mlm40-20' names no continued-pretraining run "
             "(`cpt:`) of this study (allowed: none)")):
        with pytest.raises(ConfigError) as info:
            build_plan(*study_file(tmp_path / "bad", comparisons))
        assert message in str(info.value), str(info.value)


def test_every_named_set_a_study_file_may_turn_on_has_a_writer():
    from encoderlab.study import report_text, spec

    assert set(spec.FINDINGS) == set(report_text.FINDINGS_WRITERS)


def test_a_comparison_is_one_kind_with_known_keys():
    base = {"name": "s", "checkpoints": {"a": "x"}, "evaluation": {"protocol": "p", "tasks": ["t"]}}
    for comparison, message in (
            ({"vs": ["a", "b"]}, "comparisons.0: unknown key 'vs' (allowed: versus, stability, efficiency, cpt, "
                                 "title)"),
            ({"versus": ["a", "b"], "cpt": "c"}, "comparisons.0: a comparison is exactly one of versus, stability, "
                                                  "efficiency, cpt: this one gives versus and cpt"),
            ({"versus": ["a"]}, "comparisons.0.versus: List should have at least 2 items")):
        with pytest.raises(ConfigError) as info:
            validate(StudySpec, {**base, "comparisons": [comparison]}, "study.yaml")
        assert f"study.yaml: {message}" in str(info.value), str(info.value)
    with pytest.raises(ConfigError, match="findings: Input should be 'paper' \\(got 'mine'\\)"):
        validate(StudySpec, {**base, "findings": "mine"}, "study.yaml")
