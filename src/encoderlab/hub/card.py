"""The model card (README.md) of an exported folder: architecture, training schedule, tokens seen, evaluation.

What a checkpoint knows about its training is spread over its own state.json (step, schedule, objective), its run
folder (metrics.jsonl gives tokens per step, config.yaml the initialisation) and, for an import, import.json.
Evaluation scores come from the summary.json that `encoderlab sweep` writes; without one the card says 'not
evaluated' rather than leave a reader guessing.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.errors import EncoderlabError
from encoderlab.hub.hf import CLASSES
from encoderlab.model.config import ModelConfig
from encoderlab.train.logging import read_metrics


def training_info(path: Path, state: dict) -> dict:
    info = {k: state.get(k) for k in ("step", "total_steps", "reason", "schedule", "objective")}
    info["checkpoint"] = path.name
    if (path / "import.json").exists():
        record = json.loads((path / "import.json").read_text())
        info.update(imported_from=record.get("source"), source_model_type=record.get("model_type"))
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir is None:
        return info
    info["run"] = run_dir.name
    if state.get("step") is not None:
        records = read_metrics(run_dir / "metrics.jsonl")
        rates = (r["tokens"] / r["step"] for r in records if r.get("step") and r.get("tokens"))
        per_step = next(rates, None)  # every step of a run has the same global batch of windows
        if per_step is not None:
            info["tokens_seen"] = round(state["step"] * per_step)
    if (run_dir / "config.yaml").exists():
        init = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("init") or {}
        info["init"] = {k: v for k, v in init.items() if v}
    return info


def evaluation_summaries(path: Path, given: Path | None) -> list[dict]:
    """Sweep summaries of this checkpoint: a summary.json, a sweep output folder, or (not given) ./evals if any."""
    from encoderlab.evaluation.records import checkpoint_tag

    tag = checkpoint_tag(path)
    if given is not None and not given.exists():
        raise EncoderlabError(f"--eval {given}: no such file or folder (give the summary.json that `encoderlab sweep` "
                              "writes, or its --out folder)")
    if given is not None and given.is_file():
        files = [given]
    else:
        root = given if given is not None else Path("evals")
        files = sorted((root / tag).glob("*/summary.json")) if root.is_dir() else []
        if given is not None and not files:
            raise EncoderlabError(f"--eval {given}: no evaluation of this checkpoint under it (expected "
                                  f"{given / tag}/PROTOCOL/summary.json, as `encoderlab sweep CKPT --out {given}` "
                                  "writes)")
    found = []
    for file in files:
        summary = json.loads(file.read_text())
        if not isinstance(summary.get("tasks"), dict):
            if given is not None:
                raise EncoderlabError(f"--eval {file} is not an evaluation summary (no 'tasks'): give the summary.json "
                                      "that `encoderlab sweep` writes")
            continue
        other = summary.get("checkpoint") and Path(summary["checkpoint"]).resolve() != path.resolve()
        if given is None and other:
            continue  # another checkpoint that happens to have the same tag
        found.append({"path": str(file), "protocol": (summary.get("protocol") or {}).get("name"),
                      "tasks": summary["tasks"]})
    return found


def _training_lines(info: dict) -> list[str]:
    lines = []
    if info.get("imported_from") and info.get("reason") == "imported":
        lines.append(f"- imported from `{info['imported_from']}` ({info['source_model_type']}), not trained further "
                     "by encoderlab; tokens seen by the source model: unknown")
        return lines
    if info.get("schedule"):
        lines.append(f"- objective schedule: `{info['schedule']}` (objective at this checkpoint: "
                     f"`{info.get('objective')}`)")
    if info.get("step") is not None:
        of = f" of {info['total_steps']}" if info.get("total_steps") else ""
        lines.append(f"- steps: {info['step']:,}{of} (checkpoint `{info['checkpoint']}`, written because: "
                     f"{info.get('reason')})")
    tokens = info.get("tokens_seen")
    lines.append(f"- tokens seen: {tokens:,}" if tokens is not None else "- tokens seen: unknown (no run metrics)")
    for key, value in (info.get("init") or {}).items():
        lines.append(f"- initialised with `{key}: {value}`")
    return lines or ["- unknown: the checkpoint carries no training metadata"]


def _evaluation_lines(evaluations: list[dict]) -> list[str]:
    if not evaluations:
        return ["Not evaluated."]
    lines = []
    for e in evaluations:
        lines += [f"Protocol `{e['protocol']}` (`{e['path']}`): test score at the learning rate chosen on validation, "
                  "mean over seeds with a 95% confidence interval.", "",
                  "| task | family | metric | test | 95% CI | best LR | seeds |", "|---|---|---|---|---|---|---|"]
        for name, t in e["tasks"].items():
            if "test" not in t:
                lines.append(f"| {name} | {t.get('family')} | {t.get('metric')} | failed | | | |")
                continue
            ci = f"± {t['ci95']:.2f}" if t.get("ci95") is not None else "n/a"
            lines.append(f"| {name} | {t.get('family')} | {t.get('metric')} | {t['test']:.2f} | {ci} | "
                         f"{t.get('best_lr', 0):g} | {t.get('seeds', '')} |")
        lines.append("")
    return lines


def _usage(kind: str, mask: str) -> list[str]:
    if kind == "eurobert":
        return ["```python", "from transformers import pipeline, AutoModelForSequenceClassification",
                'fill = pipeline("fill-mask", model="PATH")', f'fill("The capital of France is{mask}.")',
                'classifier = AutoModelForSequenceClassification.from_pretrained("PATH", num_labels=2)', "```"]
    return ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
            'tok = AutoTokenizer.from_pretrained("PATH")', 'model = AutoModelForCausalLM.from_pretrained("PATH")',
            'out = model.generate(**tok("The capital of France is", return_tensors="pt"), max_new_tokens=10)',
            "print(tok.decode(out[0]))", "```"]


def model_card(kind: str, cfg: ModelConfig, tok: TextTokenizer, info: dict, evaluations: list[dict],
               framing: str, note: str | None) -> str:
    what = ("a bidirectional text encoder (EuroBERT architecture, `EuroBertForMaskedLM`)" if kind == "eurobert"
            else f"a causal decoder ({kind} architecture, `{CLASSES[kind][1]}`)")
    title = "-".join(p for p in (info.get("run"), info.get("checkpoint")) if p)
    special = ", ".join(f"{r} `{tok.token(getattr(tok, f'{r}_id'))}` ({getattr(tok, f'{r}_id')})"
                        for r in ("bos", "eos", "pad", "mask"))
    pipeline_tag = "fill-mask" if kind == "eurobert" else "text-generation"
    lines = [
        "---", "library_name: transformers", f"pipeline_tag: {pipeline_tag}",
        f"tags: [encoderlab, {kind}]", "---", "", f"# {title}", "",
        f"{cfg.num_parameters() / 1e6:.1f}M parameters, {what}, exported by encoderlab from checkpoint "
        f"`{info.get('checkpoint')}`. It loads with plain `transformers` (no `trust_remote_code`).", "",
    ]
    if note:
        lines += [f"**Note:** {note}.", ""]
    lines += [
        "## Architecture", "",
        "| layers | hidden | FFN | heads (query/KV) | vocabulary | positions | RoPE theta | tied embeddings |",
        "|---|---|---|---|---|---|---|---|",
        f"| {cfg.num_hidden_layers} | {cfg.hidden_size} | {cfg.intermediate_size} | {cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads} | {cfg.vocab_size:,} | {cfg.max_position_embeddings:,} | {cfg.rope_theta:g} | "
        f"{'yes' if cfg.tie_word_embeddings else 'no'} |", "",
        "## Training", "", *_training_lines(info), "",
        "## Evaluation", "", *_evaluation_lines(evaluations), "",
        "## Tokenizer", "", f"{tok.origin}; special tokens: {special}. The tokenizer frames every input as "
        f"`{framing}`, as encoderlab did in training.", "",
        "## Use", "", *_usage(kind, tok.token(tok.mask_id)), "",
    ]
    return "\n".join(lines)
