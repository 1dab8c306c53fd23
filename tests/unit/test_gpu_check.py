"""`make gpu-check` (benchmarks/gpu_check.py) on the CPU at smoke shapes: every section's logic runs, the CUDA-only
parts are skipped with their reason, the report's JSON and markdown have their structure, the checks catch a wrong
attention mask, and the GPU section of docs/benchmarks.md is replaced in place. A few seconds."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_check  # noqa: E402
import gpu_env  # noqa: E402
import gpu_report  # noqa: E402
import gpu_sections  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    assert gpu_check.main(["--device", "cpu", "--smoke", "--out", str(out)]) == 0
    return json.loads((out / "gpu-check.json").read_text()), (out / "gpu-check.md").read_text()


def test_every_section_runs_on_cpu_or_says_why_not(report):
    data, _ = report
    assert {"device_name", "torch", "transformers", "python", "date", "gpus"} <= data.keys() and data["smoke"]
    sections = data["sections"]
    assert list(sections) == list(gpu_sections.SECTIONS)
    assert sections["fsdp2"]["status"] == "skipped" and "CUDA only" in sections["fsdp2"]["reason"]
    for name in set(sections) - {"fsdp2"}:
        assert sections[name]["status"] == "passed", (name, sections[name])
    skipped = {name: [k["what"] for k in s["skipped"]] for name, s in sections.items() if "skipped" in s}
    assert skipped["attention"] == ["flex backward"] and "compile" in skipped["pretrain-speed"]
    checks = {name: [c["check"] for c in s["checks"]] for name, s in sections.items() if "checks" in s}
    # flex: output per dtype x causality (no CPU backward); dense: output and 3 gradients each.
    assert len(checks["attention"]) == 4 + 16 and len(checks["lm-loss"]) == 6
    assert sum("loss curves, batched vs sequential" in c for c in checks["finetuning"]) == 4  # every family
    rows = sections["pretrain-speed"]["numbers"]["rows"]
    assert [r["objective"] for r in rows] == ["mlm40", "clm"] and all(r["encoderlab"]["tokens_per_s"] > 0
                                                                     for r in rows)


def test_markdown_and_docs_section(report, tmp_path):
    data, markdown = report
    assert markdown.startswith(data["date"]) and "smoke shapes (not a measurement)" in markdown
    assert all(f"| {name} |" in markdown for name in data["sections"]) and "| mlm40 |" in markdown
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\ntext\n")
    gpu_report.write_docs(data, docs)
    once = docs.read_text()
    assert once.startswith("# Benchmarks\n\ntext\n\n## GPU (`make gpu-check`)\n") and markdown in once
    gpu_report.write_docs({**data, "date": "2000-01-01"}, docs)  # a second report replaces the first
    twice = docs.read_text()
    assert twice.count(gpu_report.BEGIN) == 1 and "2000-01-01" in twice and data["date"] + "," not in twice
    shipped = (BENCHMARKS.parent / "docs" / "benchmarks.md").read_text()
    assert shipped.count(gpu_report.BEGIN) == shipped.count(gpu_report.END) == 1  # where --docs-from writes


class AcrossDocuments:
    """A broken backend: attends across document boundaries (what a wrong BlockMask would do)."""

    def layout(self, causal, doc_ids, attention_mask, window=None):
        from encoderlab.model.attention import Dense

        return Dense("flash").layout(causal, None, attention_mask, window)


def test_a_wrong_attention_mask_fails_the_check(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_sections, "flex_backend", lambda device, seq_len: AcrossDocuments())
    ctx = SimpleNamespace(device=torch.device("cpu"), sizes=gpu_sections.SIZES["smoke"], work=tmp_path,
                          checkpoint=None, log=lambda m: None)
    result = gpu_sections.run_section(gpu_sections.attention, ctx, lambda m: None)
    failed = [c["check"] for c in result["checks"] if not c["ok"]]
    assert result["status"] == "failed" and failed and all(c.startswith("flex") for c in failed)


def test_wheels_leave_the_machines_torch_alone():
    reqs = gpu_env.requirements()
    names = {gpu_env.requirement_name(r) for r in reqs}
    assert {"pydantic", "datasets", "seqeval"} <= names and not names & {"torch", "transformers"}
    assert gpu_env.shipped("pydantic_core") and not gpu_env.shipped("nvidia-cublas") and not gpu_env.shipped("Torch")
    assert gpu_env.unsatisfied(["pydantic>=2.6", "pydantic<1", "no-such-package-here>=1"]) == [
        "pydantic<1", "no-such-package-here>=1"]
    assert gpu_env.install(Path("/nonexistent"), Path("/nonexistent")) is None  # all satisfied here: nothing to do
