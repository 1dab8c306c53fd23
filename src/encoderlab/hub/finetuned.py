"""Keep a fine-tuned model (`finetune --save`, `sweep --save-models`): a folder that a stock transformers class loads
and computes exactly as encoderlab trained and scored it, without remote code, or a one-line refusal naming what does.

Which stock class holds a run is its family record's `export` (tasks/registry.py, declared in tasks/families/); this
module decides the body and writes the folder. What the built-in families' classes compute, and so what they can
hold (transformers 5.24, read from their source and measured by tests/integration/test_hf_finetuned.py):
- classification: `EuroBertForSequenceClassification` with `classifier_pooling: mean` is the mean of the last hidden
  states over the attention mask -> dense -> GELU -> classifier: encoderlab's `classification_head: dense_gelu`.
  encoderlab's default head (mean pooling -> one Linear) is no stock class's: EuroBERT's adds the dense layer, and
  the Llama, Mistral and Qwen classes read the last token. Refused, naming `--set classification_head=dense_gelu`.
- tokens: `*ForTokenClassification` is one Linear on every token (its dropout is off at inference, as ours).
- QA spans: `*ForQuestionAnswering` is one Linear(h, 2) on every token giving start and end logits (encoderlab's
  masking of positions outside the context and its span search are decoding, done on those logits). EuroBERT has no
  such class; a EuroBERT body is exactly a Llama body, so it is saved as `LlamaForQuestionAnswering`, bidirectional.
  QA as token tagging (`qa.format: tagging`) is no question-answering class's: refused, naming `qa.format=spans`.
- retrieval: a sentence-transformers folder (hub/sentence.py): the body, mean pooling, the retrieval prompts.
The body is EuroBERT's when that class holds it, else its own family's (Llama, Mistral, Qwen2, Qwen3) with
`is_causal: false` in config.json, which transformers 5.x reads to build bidirectional masks. A transformers encoder
evaluated as it is (BERT, RoBERTa, DeBERTa-v2, ...) is kept in its own classes where they hold exactly the run
(hub/finetuned_transformers.py): tokens and QA spans where the class's head is one Linear over the last hidden
states (ModernBERT's adds dense -> activation -> LayerNorm: refused), retrieval always; classification never (its
classes read the first token, or add a LayerNorm: tasks/families/classification.py `ENCODER_HEADS`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers.processors import TemplateProcessing
from torch import nn

from encoderlab.core.errors import EncoderlabError, option, option_name
from encoderlab.core.io import atomic_dir, check_writable, folder_name
from encoderlab.core.quiet import quiet_transformers
from encoderlab.data.tokenizer import TextTokenizer, load_tokenizer
from encoderlab.finetuning.migrate_keys import same_run
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.records import checkpoint_tag
from encoderlab.hub import finetuned_transformers as encoders
from encoderlab.hub import sentence
from encoderlab.hub.card import public, training_info
from encoderlab.hub.exporter import compatible_config
from encoderlab.hub.finetuned_card import finetuned_card
from encoderlab.hub.folders import refuse_run_files
from encoderlab.hub.hf import family, hf_config, refusal
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformers_body import TransformersConfig
from encoderlab.runs import checkpoint as ckpt
from encoderlab.runs.encoders import is_transformers_folder
from encoderlab.tasks import registry
from encoderlab.tasks.registry import SENTENCE_TRANSFORMERS, Body, Export

MANIFEST = "finetuned.json"  # which run the folder holds (its identity) and the records it scored
CLASS_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "eurobert": "EuroBert"}


def body_kind(cfg: ModelConfig) -> str:
    """EuroBERT when its class holds this body, else the family that does (an import keeps its own)."""
    if refusal(cfg, "eurobert") is None:
        return "eurobert"
    if (problem := refusal(cfg, family(cfg))) is not None:
        raise EncoderlabError(f"no transformers class holds this model: {problem}")
    return family(cfg)


def stock_for(task_family: str, protocol: Protocol, cfg: ModelConfig, labels: list[str] | None = None) -> Export:
    """The stock class of a run of `task_family` under `protocol` (the family record's `export`), or a one-line
    refusal naming what would save."""
    if isinstance(cfg, TransformersConfig):
        stock = registry.family(task_family).export(protocol, encoders.body(cfg, labels))
        encoders.check(stock, cfg)
        return stock
    kind = body_kind(cfg)
    return registry.family(task_family).export(protocol, Body(kind, CLASS_PREFIX[kind], tuple(labels or ()) or None))


def hf_finetuned(stock: Export, cfg: ModelConfig, backbone: dict, head: dict):
    """The stock model holding the run's weights (a strict load: every parameter placed, none left over)."""
    import transformers

    config = hf_config(cfg, stock.kind)
    for key, value in stock.config.items():
        setattr(config, key, value)
    hf = getattr(transformers, stock.cls)(config).eval()
    prefix = f"{hf.base_model_prefix}." if stock.head else ""  # a bare body (retrieval) is its own base model
    state = {f"{prefix}{k}": v for k, v in backbone.items()}
    state.update({stock.head[k]: v for k, v in head.items() if k in stock.head})
    hf.load_state_dict(state, strict=True)
    return hf.float()


def frame(tok: TextTokenizer, inputs: str, second: int = 1) -> None:
    """Frame text as the task did (protocol `inputs`): `<bos> a <eos>` and `<bos> a <eos> b <eos>`, or no `<bos>`.
    `second`: the token type of a pair's second text (0 for a transformers encoder, which encoderlab runs without
    token types: BERT's would otherwise add its type-1 embedding, and RoBERTa has none)."""
    bos, eos = tok.token(tok.bos_id), tok.token(tok.eos_id)
    first = f"{bos} " if inputs == "bos_eos" else ""
    specials = list({bos: tok.bos_id, eos: tok.eos_id}.items())
    tok.tokenizer.post_processor = TemplateProcessing(
        single=f"{first}$A {eos}", pair=f"{first}$A {eos} $B:{second} {eos}:{second}", special_tokens=specials)


def check_apart(root: Path, named: str, checkpoint: Path) -> None:
    """Refuse a save folder among a run's or checkpoint's files, as `export --out` is refused (their readers expect
    none, and `--save` would replace a checkpoint given as the folder), or inside the model folder fine-tuned (a
    transformers folder's files are its records' identity)."""
    refuse_run_files(root, named, "fine-tuned models go in a folder of their own")
    if checkpoint.is_dir() and root.resolve().is_relative_to(checkpoint.resolve()):
        raise EncoderlabError(f"{named} lies inside {checkpoint}, the model folder being fine-tuned: fine-tuned "
                              "models go in a folder of their own")


@dataclass
class SavedModels:
    """A `ModelSaver` (finetuning/model_saving.py): saves runs as folders under `root` (`exact`: `root` is the one
    run's folder)."""
    mode: str
    root: Path
    checkpoint: Path
    exact: bool = False
    log: Callable[[str], None] = lambda message: None

    def __post_init__(self) -> None:
        given = "save" if self.exact else "models"
        check_writable(self.root, option_name(given), replaced=self.exact)
        check_apart(self.root, option(given, self.root), self.checkpoint)
        if self.exact and self.root.is_dir() and any(self.root.iterdir()) and not (self.root / MANIFEST).exists():
            raise EncoderlabError(f"{option('save', self.root)} exists and holds something other than a saved "
                                  "fine-tuned model: give a new folder")

    def folder(self, name: str, identity: dict) -> Path:
        if self.exact:
            return self.root
        run = f"{name}-lr{identity['lr']:g}-seed{identity['seed']}"
        return self.root / checkpoint_tag(self.checkpoint) / folder_name(run)

    def check_replaces(self, name: str, identity: dict) -> None:
        """Refuse, before any training, a `--save` folder holding another run's model: replacing it unasked would
        lose a model its user kept (a run's own folder is not trained again; `sweep --models` names each run's)."""
        file = self.folder(name, identity) / MANIFEST
        if not self.exact or not file.exists() or self.saved(name, identity):
            return
        try:
            held = json.loads(file.read_text())
            task, kept = next(iter(held["records"])), held["identity"]
            what = f"{task}, lr {kept['lr']:g}, seed {kept['seed']}"
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            what = f"its {MANIFEST} unreadable"
        raise EncoderlabError(f"{option('save', self.root)} holds the fine-tuned model of another run ({what}): give "
                              "a new folder, or remove that one to save this run there")

    def check(self, task_family: str, protocol: Protocol, model_cfg: ModelConfig, name: str) -> None:
        try:
            stock_for(task_family, protocol, model_cfg)
        except EncoderlabError as e:
            raise EncoderlabError(f"{name}: its fine-tuned model cannot be saved: {e}") from None

    def saved(self, name: str, identity: dict) -> bool:
        file = self.folder(name, identity) / MANIFEST
        try:
            manifest = json.loads(file.read_text())
            # a model saved under key algorithm 1 is the same run (finetuning/migrate_keys.py)
            return manifest.get("identity") == identity or same_run(manifest.get("identity"), identity,
                                                                    manifest.get("records"))
        except (OSError, ValueError, AttributeError):  # none, or not one of ours: the run is trained and saved again
            return False

    def model_and_tokenizer(self, stock: Export, cfg, backbone: nn.Module, head: nn.Module, inputs: str):
        """The stock model holding the run, and the checkpoint's tokenizer framing text as the task did."""
        if isinstance(cfg, TransformersConfig):  # a transformers encoder: its own classes and tokenizer
            hf = encoders.hf_finetuned(stock, cfg, backbone, head)
            tok = load_tokenizer(self.checkpoint, as_transformers=True, needs_mask=False)  # fine-tuning masks nothing
            frame(tok, inputs, second=0)
            return hf, tok
        hf, tok = hf_finetuned(stock, cfg, backbone.state_dict(), head.state_dict()), load_tokenizer(
            self.checkpoint / "tokenizer")
        frame(tok, inputs)
        return hf, tok

    def save(self, unit, backbone: nn.Module, head: nn.Module, records: dict[str, dict], identity: dict) -> None:
        first = next(iter(records.values()))
        protocol = Protocol.model_validate(first["protocol"]).for_task(unit.name)
        cfg = backbone.config
        stock = stock_for(unit.family, protocol, cfg, unit.labels)
        hf, tok = self.model_and_tokenizer(stock, cfg, backbone, head, protocol.inputs)
        out = self.folder(unit.name, identity)
        path = self.checkpoint if is_transformers_folder(self.checkpoint) else ckpt.resolve(self.checkpoint)
        source = training_info(path, {})  # its Hub id and license, when it has them
        card = finetuned_card(stock, unit.family, cfg, records, identity, out.name, tok,
                              {k: source.get(k) for k in ("base_model", "license", "transformers_folder")},
                              pair=getattr(unit, "text_fields", None))  # a pair task's two fields, else None
        with atomic_dir(out) as tmp:
            with quiet_transformers():  # the line below says what was saved where
                hf.save_pretrained(str(tmp))
            compatible_config(tmp)
            tok.save(tmp, model_max_length=first["max_length"], origin=public(tok.origin))
            (tmp / "README.md").write_text(card, encoding="utf-8")
            if stock.library == SENTENCE_TRANSFORMERS:
                sentence.write_modules(tmp, cfg)
                (tmp / "sentence_bert_config.json").write_text(json.dumps(  # the length it was fine-tuned at
                    {"max_seq_length": first["max_length"], "do_lower_case": False}, indent=2) + "\n")
            # published with the weights: the checkpoint's and the records' folders by their last names only
            (tmp / MANIFEST).write_text(public(json.dumps({"identity": identity, "class": stock.cls,
                                                           "records": records}, indent=2, default=str)) + "\n")
        self.log(f"saved {unit.name} lr={identity['lr']:g} seed={identity['seed']} as {stock.cls} -> {out}")


def keeper(mode: str, folder: Path | None, checkpoint: Path, *, exact: bool = False, log=lambda m: None):
    """The `ModelSaver` of `finetune --save FOLDER` (exact: one run's folder) or `sweep --save-models MODE --models
    FOLDER`, saying what it saved to `log`; None: nothing is saved."""
    from encoderlab.finetuning.model_saving import MODES

    if mode not in MODES:
        raise EncoderlabError(f"{option('save-models', mode, quote=True)}: give one of {', '.join(MODES)}")
    if mode == "none" or folder is None:
        return None
    from encoderlab.runs.encoders import resolve_encoder

    return SavedModels(mode, Path(folder), resolve_encoder(checkpoint, unpack=False), exact=exact, log=log)
