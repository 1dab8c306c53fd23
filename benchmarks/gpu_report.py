"""The markdown of a gpu-check report (benchmarks/gpu_check.py), and its place in docs/benchmarks.md."""
from __future__ import annotations

import json
from pathlib import Path

BEGIN = "<!-- gpu-check: begin (written by benchmarks/gpu_check.py --docs-from) -->"
END = "<!-- gpu-check: end -->"


def table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(str(c) for c in row) + " |" for row in rows]]


def markdown(report: dict) -> str:
    lines = [f"{report['date']}, {report['device_name']} ({report['device']}, {report['gpus']} GPU(s)), torch "
             f"{report['torch']}, transformers {report['transformers']}, Python {report['python']}"
             f"{', smoke shapes (not a measurement)' if report['smoke'] else ''}: `benchmarks/gpu_check.py`.", ""]
    lines += table(["section", "status", "seconds", "checks passed", "skipped"], [
        [name, s["status"], s["seconds"], f"{sum(c['ok'] for c in s.get('checks', []))}/{len(s.get('checks', []))}",
         "; ".join(f"{k['what']}: {k['reason']}" for k in s.get("skipped", [])) or s.get("reason", "")]
        for name, s in report["sections"].items()])
    checks = [[name, c["check"], f"{c['value']:.3g}", f"{c['limit']:g}", "ok" if c["ok"] else "**FAIL**"]
              for name, s in report["sections"].items() for c in s.get("checks", [])]
    if checks:
        lines += ["", *table(["section", "check", "error", "limit", ""], checks)]
    speed = report["sections"].get("pretrain-speed", {}).get("numbers")
    if speed:
        measured = speed.get("matmul peak TFLOP/s (measured)") or {  # older reports: bf16 only
            "dtype": "bf16", "TFLOP/s": speed["bf16 matmul peak TFLOP/s (measured)"]}
        lines += ["", f"Pretraining, {measured['dtype']} matmul peak measured: {measured['TFLOP/s']} "
                  "TFLOP/s (target, 210m: MFU >= 50% and >= 1.5x transformers, both compiled)", ""]
        lines += table(["preset", "seq", "batch", "objective", "compile", "encoderlab tok/s", "MFU", "peak MiB",
                        "transformers tok/s", "MFU", "peak MiB", "ratio"], [
            [r["preset"], r["seq_len"], r["batch"], r["objective"], r["compile"],
             f"{r['encoderlab']['tokens_per_s']:,}", f"{r['encoderlab']['mfu']:.1%}",
             r["encoderlab"].get("peak_memory_mib", "-"), f"{r['transformers']['tokens_per_s']:,}",
             f"{r['transformers']['mfu']:.1%}", r["transformers"].get("peak_memory_mib", "-"), f"{r['ratio']:.2f}x"]
            for r in speed["rows"]])
    for name in ("attention-speed", "finetuning"):
        numbers = report["sections"].get(name, {}).get("numbers")
        if numbers:
            lines += ["", f"{name}:", ""] + table(["", "value"], [[k, _cell(v)] for k, v in numbers.items()
                                                                 if not k.startswith("stderr")])
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def write_docs(report: dict, docs: Path) -> None:
    """Replace the text between the gpu-check markers of `docs` with this report (appended when absent)."""
    text = docs.read_text()
    block = f"{BEGIN}\n{markdown(report)}{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## GPU (`make gpu-check`)\n" + block + "\n"
    docs.write_text(text)
