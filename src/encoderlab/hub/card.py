"""The model card (README.md) of an exported folder: architecture, training schedule, tokens seen, evaluation.

What a checkpoint knows about its training is spread over its own state.json (step, schedule, objective), its run
folder (metrics.jsonl gives tokens per step, config.yaml the initialisation) and, for an import, import.json.
Evaluation scores come from the summary.json that `encoderlab sweep` writes; without one the card says 'not
evaluated'. The card is meant to be published: its YAML front matter carries the Hub's metadata (license,
base_model, datasets, model-index) and no local path of the machine that wrote it.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import yaml

from encoderlab.core.config import load_yaml
from encoderlab.core.counts import parameters_text
from encoderlab.core.errors import EncoderlabError, command, option, option_name
from encoderlab.core.io import read_json
from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.finetuning.aggregate import ci_text
from encoderlab.finetuning.summary_file import common_grid, holds_tasks, task_grids
from encoderlab.hub.hf import Target
from encoderlab.model.config import ModelConfig
from encoderlab.runs.encoders import is_transformers_folder
from encoderlab.runs.logging import read_metrics
from encoderlab.tasks import baselines, registry
from encoderlab.tasks.metrics import DEFINITIONS

# The Hub id and license of the sources encoderlab can name: the pinned SmolLM2 GGUF (docs/data.md), and any folder in
# the huggingface_hub cache, whose path names its repository (.../models--OWNER--NAME/snapshots/REVISION).
KNOWN_SOURCES = {"SmolLM2-135M-Instruct.Q4_1.gguf": ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0"),
                 "minilm-l6": ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")}  # runs/encoders.py NAMED
# The first transformers versions measured to load each export (docs/hf.md); other causal kinds: encoderlab's own floor.
# "encoder": a decoder family with `is_causal: false`, which 5.1 and older ignore (they run it causally, silently).
TRANSFORMERS = {"eurobert": "5.3", "llama": "4.48", "encoder": "5.2"}
SENTENCE = "sentence-transformers"  # hub/sentence.py: the checkpoint's own family's body, mean-pooled


def base_model(source: str) -> tuple[str | None, str | None]:
    """(Hub id, license) of an imported source when known, else None for each."""
    path = Path(source)
    if path.name in KNOWN_SOURCES:
        return KNOWN_SOURCES[path.name]
    cached = next((part.split("--")[1:] for part in path.parts if part.startswith("models--")), [])
    return ("/".join(cached) if len(cached) == 2 else None), None


def public(text: str) -> str:
    """`text` with each absolute local path cut to its last name: the paths of the machine that wrote a card mean
    nothing where it is published (and may say more than its author wants). A closing tag such as `</s>` (Llama-2's
    EOS) is not a path."""
    return re.sub(r"(?<![\w.:/~<])/[^\s`'\"()|]+", lambda m: Path(m.group(0)).name or "/", text)


def _import_record(checkpoint: Path) -> dict | None:
    file = checkpoint / "import.json"
    return json.loads(file.read_text()) if file.exists() else None


def _datasets(data_path: str | None) -> list[str]:
    """The Hub datasets a run's data was prepared from, when its corpus manifest names any (local files are not)."""
    if not data_path:
        return []
    manifest = next((p for p in (Path(data_path) / "corpus" / "manifest.json",
                                 Path(data_path).parent / "corpus" / "manifest.json") if p.exists()), None)
    source = json.loads(manifest.read_text()).get("source", "") if manifest else ""
    return [s.strip() for s in source.split(",")
            if re.fullmatch(r"[\w.-]+(/[\w.-]+)?", s.strip()) and not Path(s.strip()).exists()]


def training_info(path: Path, state: dict) -> dict:
    info = {k: state.get(k) for k in ("step", "total_steps", "reason", "schedule", "objective")}
    info["checkpoint"] = path.name
    if is_transformers_folder(path):  # not an encoderlab checkpoint: no run, no import record; the folder is the base
        info["base_model"], info["license"] = base_model(str(path))
        info["transformers_folder"] = True
        return info
    record = _import_record(path)
    if record:
        info.update(imported_from=record.get("source"), source_model_type=record.get("model_type"))
        info["base_model"], info["license"] = base_model(record.get("source", ""))
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
        config = load_yaml(run_dir / "config.yaml")
        info["init"] = {k: v for k, v in (config.get("init") or {}).items() if v}
        info["datasets"] = _datasets((config.get("data") or {}).get("path"))
        start = info["init"].get("from_weights")
        record = _import_record(Path(start)) if start and Path(start).is_dir() else None
        if record:  # continued pretraining of an import: a fine-tune of its source, under its license
            info["base_model"], info["license"] = base_model(record.get("source", ""))
            info["source_model_type"] = record.get("model_type")  # its family (hub/exporter.py `own_family`)
    return info


def weights_source(path: Path) -> tuple[str, str]:
    """The SHA-256 of the checkpoint's weights and where it was read: its checksums manifest, or the file itself."""
    from encoderlab.runs import checkpoint as ckpt

    manifest = path / ckpt.MANIFEST
    return ckpt.weights_digest(path), str(manifest if manifest.is_file() else path / ckpt.WEIGHTS)


def _sweep(cli: str = "", api: str = "...") -> str:
    """The sweep that writes a summary, as the caller runs it: `encoderlab sweep CLI`, or `encoderlab.sweep(API)`."""
    return "`" + command(f"encoderlab sweep {cli}".rstrip(), f"encoderlab.sweep({api})") + "`"


def _summary_files(tag: str, given: Path | None) -> list[Path]:
    if given is not None and not given.exists():
        raise EncoderlabError(f"{option('eval', given)}: no such file or folder (give the summary.json that "
                              f"{_sweep()} writes, or its {option_name('out')} folder)")
    if given is not None and given.is_file():
        return [given]
    root = given if given is not None else Path("evals")
    files = sorted((root / tag).glob("*/summary.json")) if root.is_dir() else []
    if given is not None and not files:
        raise EncoderlabError(f"{option('eval', given)}: no evaluation of this checkpoint under it (expected "
                              f"{given / tag}/PROTOCOL/summary.json, as "
                              f"{_sweep(f'CKPT TASKS --out {given}', f'CKPT, TASKS, out={str(given)!r}')} writes)")
    return files


def evaluation_summaries(path: Path, given: Path | None,
                         log: Callable[[str], None] = lambda message: None) -> list[dict]:
    """Sweep summaries of this checkpoint's weights: a summary.json, a sweep output folder, or (not given) ./evals
    if any. A card publishes only what was measured on the weights it describes: a summary whose `weights_sha256`
    is not theirs is refused when given, and left out (logged) when found."""
    from encoderlab.finetuning.records import WEIGHTS, checkpoint_tag

    weights, source = weights_source(path)
    found = []
    for file in _summary_files(checkpoint_tag(path), given):
        summary = read_json(file, f"give the summary.json that {_sweep()} writes")
        if not isinstance(summary, dict) or not isinstance(summary.get("tasks"), dict):
            if given is not None:
                raise EncoderlabError(f"{option('eval', file)} is not an evaluation summary (no 'tasks'): give the "
                                      f"summary.json that {_sweep()} writes")
            continue
        made = summary.get(WEIGHTS)
        if made != weights:
            measured = (f"was measured on weights {str(made)[:12]} (its {WEIGHTS})" if made else
                        f"names no {WEIGHTS} (its weights are unknown; {_sweep()} writes it again)")
            theirs = f"{path} holds weights {weights[:12]} ({source})"
            if given is not None:
                raise EncoderlabError(f"{option('eval', file)} {measured}, but {theirs}: give the evaluation of these "
                                      f"weights, or run {_sweep(f'{path} TASKS', f'{str(path)!r}, TASKS')}")
            log(f"left out of the card: {file} {measured}, but {theirs}")
            continue
        # Named by its key (name and settings hash): two evaluations under one protocol name with other settings
        # (steps, LRs) are two entries that must not read as one protocol's conflicting scores
        key = summary.get("protocol_key") or (summary.get("protocol") or {}).get("name") or file.parent.name
        grids = task_grids(summary)
        found.append({"path": str(file), "protocol": key, "tasks": summary["tasks"], "grids": grids,
                      "grid": common_grid(grids.values()),
                      "current_key": current_key(summary.get("protocol"), file)})
    return _without_superseded(found, log)


def current_key(protocol, where: Path) -> str | None:
    """The protocol key this code files a stored protocol's records under (None where it cannot tell)."""
    from encoderlab.finetuning import migrate_protocol

    try:
        return migrate_protocol.key(migrate_protocol.upgrade(protocol, where))
    except (EncoderlabError, TypeError, ValueError, AttributeError):
        return None


def _without_superseded(found: list[dict], log: Callable[[str], None]) -> list[dict]:
    """The summaries less those an earlier key algorithm filed apart whose protocol's folder under the current key
    has a summary holding each of their tasks under a grid holding its own: it counts their records with its own
    (finetuning/migrate_keys.py), so the card would show one protocol's runs twice. One of another grid (a
    `finetune` at another LR wrote it) does not report theirs, and they stay, each entry naming its grid."""
    grids = {Path(f["path"]).parent.name: f["grids"] for f in found}  # a summary's folder is the key it was filed under
    out = []
    for f in found:
        key = f.pop("current_key")
        if key is not None and key != Path(f["path"]).parent.name and holds_tasks(grids.get(key), f["grids"]):
            log(f"left out of the card: {f['path']}, filed under an older protocol key; {key}'s summary holds its runs")
            continue
        out.append(f)
    return out


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


def evaluation_lines(evaluations: list[dict]) -> list[str]:
    if not evaluations:
        return ["Not evaluated."]
    lines = []
    for e in evaluations:
        lines += [f"Protocol `{e['protocol']}`{_grid_text(e)} (`{e['path']}`): test score at the "
                  "learning rate chosen on validation, mean over seeds with a 95% confidence interval, beside the "
                  "task's strongest baseline (the best of its family's: majority class and TF-IDF + logistic "
                  "regression, all \"O\", first span and always abstaining, random and BM25 rankings); \"-\": an "
                  "evaluation from before that baseline was recorded.", "",
                  "| task | family | metric | test | 95% CI | best LR | seeds | test examples | strongest baseline | "
                  "vs baseline |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, t in e["tasks"].items():
            if "test" not in t:
                lines.append(f"| {name} | {t.get('family')} | {t.get('metric')} | failed | | | | | | |")
                continue
            lines.append(f"| {name} | {t.get('family')} | {t.get('metric')} | {t['test']:.2f} | {ci_text(t)} | "
                         f"{t.get('best_lr', 0):g} | {t.get('seeds', '')} | {t.get('test_examples') or '-'} | "
                         f"{strongest_text(t)} | {versus_text(t)} |")
        lines += ["", *_task_grid_lines(e), *definition_lines(t.get("metric") for t in e["tasks"].values())]
        lines.append("")
    return lines


def _grid_text(e: dict) -> str:
    """`, LRs 0.001, 0.003 x seeds 0, 1`: the runs an entry counts, which its key does not say (key algorithm 2);
    where its tasks were swept over other grids, each task's is named below its table (`_task_grid_lines`)."""
    return f", {_runs_text(e['grid'])}" if e.get("grid") else ", each task's own grid" if _per_task(e) else ""


def _per_task(e: dict) -> bool:
    return len({str(g) for g in (e.get("grids") or {}).values()}) > 1


def _runs_text(grid: tuple[list, list]) -> str:
    return f"LRs {', '.join(f'{lr:g}' for lr in grid[0])} x seeds {', '.join(str(s) for s in grid[1])}"


def _task_grid_lines(e: dict) -> list[str]:
    """Each task's grid, where an entry's tasks were swept over different ones (summary.json holds each under its
    own)."""
    named = [f"`{task}` {_runs_text(g) if g else 'grid unknown'}" for task, g in (e.get("grids") or {}).items()]
    return [f"Runs counted per task: {'; '.join(named)}.", ""] if _per_task(e) else []


def definition_lines(metrics) -> list[str]:
    """`- `metric`: what it is`, for each metric named (once, sorted) that has a definition."""
    defined = {**DEFINITIONS, **{m: d for record in registry.families() for m, d in record.metric_definitions.items()}}
    return [f"- `{m}`: {defined[m]}" for m in sorted(set(metrics) & set(defined))]


def strongest_text(t: dict) -> str:
    """A summary's strongest baseline, named, with its test value; "-" when it has none recorded."""
    best = t.get("strongest_baseline")
    return f"{baselines.LABELS.get(best['name'], best['name'])} {best['value']:.2f}" if best else "-"


def versus_text(t: dict) -> str:
    """The score against the strongest baseline, or what makes it no learned score (a constant, below baseline)."""
    return t.get("warning") or baselines.versus(t)


def _version_guard(target: Target) -> list[str]:
    """Code that refuses a transformers which would silently run a decoder family's encoder causally."""
    if target.causal or target.body == "eurobert":
        return []
    floor = TRANSFORMERS["encoder"]
    return ["import transformers", "from packaging.version import Version",
            f'assert Version(transformers.__version__) >= Version("{floor}"), "transformers < {floor} ignores '
            'is_causal: false and would run this encoder causally"']


def _usage(target: Target, mask: str, name: str) -> list[str]:
    kind = target.kind
    if kind == SENTENCE:
        return ["```python", *_version_guard(target), "from sentence_transformers import SentenceTransformer",
                f'model = SentenceTransformer("{name}")',
                'queries = model.encode_query(["what is the capital of France?"])  # prompt "Query: ", as in training',
                'documents = model.encode_document(["Paris is the capital of France."])  # prompt "Document: "',
                "print(model.similarity(queries, documents))  # cosine", "```"]
    if kind == "eurobert":
        return ["```python", "from transformers import pipeline, AutoModelForSequenceClassification",
                f'fill = pipeline("fill-mask", model="{name}")', f'fill("The capital of France is{mask}.")',
                f'classifier = AutoModelForSequenceClassification.from_pretrained("{name}", num_labels=2)', "```"]
    if not target.causal:
        return ["```python", *_version_guard(target), "from transformers import AutoModel, AutoTokenizer",
                f'tok = AutoTokenizer.from_pretrained("{name}")', f'model = AutoModel.from_pretrained("{name}")',
                'batch = tok(["The capital of France is Paris."], return_tensors="pt", padding=True)',
                "hidden = model(**batch).last_hidden_state  # bidirectional: every token sees the whole text", "```"]
    return ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f'tok = AutoTokenizer.from_pretrained("{name}")', f'model = AutoModelForCausalLM.from_pretrained("{name}")',
            'out = model.generate(**tok("The capital of France is", return_tensors="pt"), max_new_tokens=10)',
            "print(tok.decode(out[0]))", "```"]


def model_index(name: str, evaluations: list[dict]) -> list[dict]:
    results = [{"task": {"type": registry.family(t["family"]).card.hub_task, "name": t["family"]},
                "dataset": {"name": task, "type": task},
                "metrics": [{"type": t.get("metric"), "value": round(t["test"], 2),
                             "name": f"test {t.get('metric')} (protocol {e['protocol']}, mean of {t.get('seeds')} "
                                     f"seeds at the learning rate chosen on validation{caveat(t)})"}]}
               for e in evaluations for task, t in e["tasks"].items() if "test" in t]
    return [{"name": name, "results": results}] if results else []


def caveat(t: dict) -> str:
    """What the model-index must say beside a score: its strongest baseline, and a warning when there is one."""
    best = t.get("strongest_baseline")
    said = f"; strongest baseline {strongest_text(t)}" if best else ""
    return said + (f"; {t['warning']}" if t.get("warning") else "")


def _front_matter(target: Target, info: dict, evaluations: list[dict], name: str) -> list[str]:
    kind = target.kind
    library, task = {"eurobert": ("transformers", "fill-mask"), SENTENCE: (SENTENCE, "sentence-similarity")}.get(
        kind, ("transformers", "text-generation" if target.causal else "feature-extraction"))
    meta = {"library_name": library, "pipeline_tag": task, "tags": ["encoderlab", kind],
            "license": info.get("license") or "unknown"}
    meta.update({k: info[k] for k in ("base_model", "datasets") if info.get(k)})
    index = model_index(name, evaluations)
    if index:
        meta["model-index"] = index
    return ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(), "---"]


def _what(target: Target) -> str:
    if target.causal:
        return f"a causal decoder ({target.body}, `{target.cls}`)"
    body = "EuroBERT" if target.body == "eurobert" else f"{target.body} with `is_causal: false`"
    if target.kind == SENTENCE:
        return f"a bidirectional sentence encoder ({body}, `{target.cls}`, mean-pooled by sentence-transformers)"
    return f"a bidirectional text encoder ({body}, `{target.cls}`)"


def _versions(target: Target) -> str:
    if target.body == "eurobert":
        return (f"`transformers` {TRANSFORMERS['eurobert']} or later, without `trust_remote_code` (EuroBERT is built "
                f"into transformers from {TRANSFORMERS['eurobert']}; 4.x has no EuroBERT class)")
    if not target.causal:
        floor = TRANSFORMERS["encoder"]
        return (f"`transformers` {floor} or later, without `trust_remote_code`. **Older versions (every 4.x, 5.0, "
                f"5.1) ignore `is_causal: false` and load it silently as a causal model** (measured): the hidden "
                f"states are then wrong; the code below refuses them")
    if target.body == "llama":
        return (f"`transformers` {TRANSFORMERS['llama']} or later, without `trust_remote_code` (its config.json "
                "reads the same in 4.x and 5.x)")
    return (f"`transformers` {TRANSFORMERS['eurobert']} or later (measured; older versions are not), without "
            "`trust_remote_code`")


def model_card(target: Target, cfg: ModelConfig, tok: TextTokenizer, info: dict, evaluations: list[dict],
               framing: str, note: str | None, name: str, parameters: int) -> str:
    """The README.md of the export folder `name` (the name its users load it by, beside it or on the Hub)."""
    what, versions = _what(target), _versions(target)
    title = "-".join(p for p in (info.get("run"), info.get("checkpoint")) if p)
    special = ", ".join(f"{r} `{tok.token(getattr(tok, f'{r}_id'))}` ({getattr(tok, f'{r}_id')})"
                        for r in ("bos", "eos", "pad", "mask"))
    license_line = (f"License: `{info['license']}`, the source model's." if info.get("license") else
                    "License: not recorded by encoderlab (`unknown` above): the weights carry the terms of the "
                    "model they were imported from or trained on and of their training data; set `license` before "
                    "publishing.")
    lines = [
        *_front_matter(target, info, evaluations, name), "", f"# {title}", "",
        f"{parameters_text(parameters)} parameters, {what}, exported by encoderlab from checkpoint "
        f"`{info.get('checkpoint')}`. It loads with {versions}.", "", license_line, "",
    ]
    lines += [f"**Note:** {note}.", ""] if note else []
    lines += [
        "## Architecture", "",
        "| layers | hidden | FFN | heads (query/KV) | vocabulary | positions | RoPE theta | tied embeddings |",
        "|---|---|---|---|---|---|---|---|",
        f"| {cfg.num_hidden_layers} | {cfg.hidden_size} | {cfg.intermediate_size} | {cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads} | {cfg.vocab_size:,} | {cfg.max_position_embeddings:,} | {cfg.rope_theta:g} | "
        f"{'yes' if cfg.tie_word_embeddings else 'no'} |", "",
        "## Training", "", *_training_lines(info), "",
        "## Evaluation", "", *evaluation_lines(evaluations), "",
        "## Tokenizer", "", f"{tok.origin}; special tokens: {special}. "
        + ("It adds no special token to an input" if framing == "text" else f"It frames every input as `{framing}`")
        + (", as the source model's tokenizer does" if info.get("reason") == "imported" else
           ", as encoderlab did in training") + f"; `model_max_length` is the model's "
        f"{cfg.max_position_embeddings:,} positions.", "",
        "## Use", "", *_usage(target, tok.token(tok.mask_id), name), "",
    ]
    return public("\n".join(lines))
