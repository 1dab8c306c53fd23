"""The model card (README.md) of a saved fine-tuned model (hub/finetuned.py): which run it is, what it scored against
what baseline, under which protocol, and how to load it. Like the export's card (hub/card.py) it is meant to be
published: Hub metadata in its front matter, no local path. A score is read as the export's card and the sweep
table read one (finetuning/aggregate.py `summarize`, hub/card.py): beside every baseline of its task, against the
strongest, named, or flagged when the run predicts a constant or does not beat it."""
from __future__ import annotations

import yaml

from encoderlab.data.tokenizer import TextTokenizer
from encoderlab.finetuning.aggregate import summarize
from encoderlab.hub.card import (
    TRANSFORMERS,
    caveat,
    definition_lines,
    public,
    strongest_text,
    versus_text,
)
from encoderlab.hub.finetuned_transformers import MEASURED
from encoderlab.model.config import ModelConfig
from encoderlab.tasks import baselines, registry
from encoderlab.tasks.classification import field_label
from encoderlab.tasks.registry import Card, Export

COMMON = ("name", "max_steps", "epochs", "batch_size", "warmup_fraction", "decay", "dtype", "weights", "inputs",
          "lr_choice")  # the protocol settings every card shows; a family's own are its record's `card.protocol_keys`


def read(records: dict[str, dict]) -> dict[str, dict]:
    """Each task's record of this one run, summarised as a sweep's task is: its baselines, the strongest named, the
    constant it predicts (if it does), the warning, the number of test examples."""
    return {task: summarize([r])["tasks"][r["task"]] for task, r in records.items()}


def _scores(name: str, r: dict, t: dict) -> str:
    s = r["scores"]
    every = ", ".join(f"{baselines.LABELS.get(b, b)} {v:.2f}" for b, v in t["baselines"].items()) or "-"
    return (f"| {name} | {r['metric']} | {s['validation']['score']:.2f} | {s['test']['score']:.2f} | "
            f"{t.get('test_examples') or '-'} | {every} | {strongest_text(t)} | {versus_text(t)} |")


def _protocol_lines(card: Card, record: dict, key: str) -> list[str]:
    p = record["protocol"]
    shown = {k: p[k] for k in (*COMMON, *card.protocol_keys) if k in p}
    return [f"Protocol `{p.get('name')}` (key `{key}`), inputs cut at {record['max_length']} tokens:", "", "```yaml",
            yaml.safe_dump(shown, sort_keys=False).rstrip(), "```"]


def _loads_with(cls: str, config: dict, cfg) -> str:
    """Which transformers versions compute the folder as trained."""
    if not isinstance(cfg, ModelConfig):  # a transformers encoder, kept in its own classes
        return f"`transformers` {MEASURED} (measured), where `{cls}` is built in"
    if config.get("is_causal") is False:
        return ("`transformers` 5.24 (measured), which reads `is_causal: false` from config.json and attends both "
                "ways; a version that ignores that key would attend left to right and compute another model")
    return f"`transformers` {TRANSFORMERS['eurobert']} or later (EuroBERT is built in from {TRANSFORMERS['eurobert']})"


def _framing(protocol: dict, pair: tuple[str, ...] | None) -> str:
    """How to give the model its input: a text, and a pair as fine-tuning gave it (two segments, or the authors'
    one labelled text, which two texts given to the tokenizer would not reproduce)."""
    bos = "<bos> " if protocol.get("inputs", "bos_eos") == "bos_eos" else ""
    line = f"The tokenizer frames a text as `{bos}text <eos>`"
    if not pair or len(pair) != 2:
        return f"{line} (a pair: the second text and `<eos>` follow)"
    a, b = pair
    if protocol.get("sentence_pairs") == "labelled":
        one = f'f"{field_label(a)}: {{{a}}}\\n{field_label(b)}: {{{b}}}"'
        return (f"{line}; a pair ({a}, {b}) was fine-tuned as one text, `{one}` (`sentence_pairs: labelled`): give "
                "it so, not as two texts")
    return f"{line}; a pair ({a}, {b}) as two texts, `tok({a}, {b})`: `{bos}{a} <eos> {b} <eos>`"


def _license_line(source: dict) -> str:
    if source.get("license"):
        return (f"License: `{source['license']}`, that of `{source.get('base_model') or 'the source model'}`, which "
                "it was fine-tuned from; the task data's terms apply too.")
    if source.get("transformers_folder"):
        return ("License: none given (encoderlab reads none from the model folder it was fine-tuned from): the "
                "weights carry that model's terms and the task data's; set `license` from them before publishing.")
    return ("License: none given (encoderlab records none for its own pretraining): the weights carry the terms of "
            "their pretraining data and of the task data; set `license` from them before publishing.")


def finetuned_card(stock: Export, family: str, cfg: ModelConfig, records: dict[str, dict], identity: dict, name: str,
                   tok: TextTokenizer, source: dict | None = None, pair: tuple[str, ...] | None = None) -> str:
    """README.md of the saved run `identity`, with the `records` of the tasks it was scored on. `source`: what is
    known of the checkpoint it was fine-tuned from (hub/card.py `training_info`): its Hub id (`base_model`) and
    license when it came from a named model, neither for encoderlab's own pretraining (a license is not made up).
    `pair`: the two text fields of a pair task (classification), whose card says how to give a pair."""
    source, card, cls = source or {}, registry.family(family).card, stock.cls
    first, read_as = next(iter(records.values())), read(records)
    trained = first["trained_on"]["task"]
    meta = {"library_name": stock.library, "pipeline_tag": card.hub_task, "tags": ["encoderlab", "fine-tuned", family],
            **{k: source[k] for k in ("license", "base_model") if source.get(k)},
            "model-index": [{"name": name, "results": [
                {"task": {"type": card.hub_task, "name": family}, "dataset": {"name": task, "type": task},
                 "metrics": [{"type": r["metric"], "value": round(r["scores"]["test"]["score"], 2),
                              "name": f"test {r['metric']} (one run: lr {identity['lr']:g}, seed "
                                      f"{identity['seed']}{caveat(read_as[task])})"}]}
                for task, r in records.items()]}]}
    lines = ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# {name}", "",
             f"`{cls}` (a body of {cfg.num_parameters():,} parameters), fine-tuned by encoderlab on "
             f"`{trained}` ({family}) from checkpoint `{first['tag']}` (weights sha256 `{identity['weights_sha256']}`"
             f"). One run: learning rate {identity['lr']:g}, seed {identity['seed']}, {first['steps']} steps, "
             f"trained by the {first.get('engine', 'sequential')} engine on {first.get('device')}. The stock class "
             "computes the head and pooling it was trained with, without `trust_remote_code`, in "
             f"{_loads_with(cls, dict(stock.config), cfg)}.",
             "",
             _license_line(source), "",
             "## Scores", "", "This model's own scores (the percentages encoderlab recorded for this run), the number "
             "of test examples scored, and on test the scores of the task's baselines, trivial and lexical predictors "
             "that use no model (those that apply of: majority class and TF-IDF + logistic regression, all "
             "\"O\", first span and always abstaining, random and BM25 rankings), the strongest of them named, and "
             "this run against it (or that it predicts a constant, or does not beat it):", "",
             "| task | metric | validation | test | test examples | baselines (test) | strongest baseline | "
             "vs baseline |", "|---|---|---|---|---|---|---|---|"]
    lines += [_scores(task, r, read_as[task]) for task, r in records.items()]
    lines += ["", *definition_lines(r["metric"] for r in records.values())]
    lines += ["", "## Protocol", "", *_protocol_lines(card, first, identity["protocol_key"]), "",
              "## Inputs", "", f"{_framing(first['protocol'], pair)}, as in fine-tuning; `model_max_length` is "
              f"{first['max_length']}, the length it was "
              f"fine-tuned at. Special tokens: bos `{tok.token(tok.bos_id)}`, eos `{tok.token(tok.eos_id)}`, pad "
              f"`{tok.token(tok.pad_id)}`. {card.decoding}", "", "## Use", "", *card.usage(cls, name), ""]
    return public("\n".join(lines))
