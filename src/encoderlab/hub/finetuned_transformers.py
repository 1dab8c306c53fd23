"""A fine-tuned run of a transformers encoder (model/transformers_body.py) kept in its own stock classes
(hub/finetuned.py): `BertForTokenClassification`, `RobertaForQuestionAnswering`, `DebertaV2Model` in a
sentence-transformers folder, ...

The family's record names the class and where encoderlab's head goes in it (tasks/families/, `Body.transformers`);
this module decides whether that class holds exactly the run, before any work: it builds the class from the config
on the meta device (nothing allocated) and compares its parameters with the body's, under the class's
`base_model_prefix`, plus the head's. A parameter of the class that our weights do not fill (ModernBERT's token and
QA classes add a `head` of dense -> activation -> LayerNorm before their classifier) is refused, listed; a weight of
ours the class has no place for is refused too, except a BERT-style pooler, which the hidden states never pass
through. On save the class is loaded strictly and its outputs on a small batch are compared with the trained
backbone and head's: a class that would compute anything else is not saved.
"""
from __future__ import annotations

import torch
from torch import nn

from encoderlab.core.errors import EncoderlabError
from encoderlab.model.transformers_body import TransformersBody, TransformersConfig
from encoderlab.runs.encoders import UNUSED_MISSING
from encoderlab.tasks.registry import Body, Export, not_saved

LABEL_KEYS = ("id2label", "label2id", "num_labels")  # the source folder's, replaced by the task's for a head
MEASURED = "5.24"  # the transformers version the tests load these folders with

TOLERANCE = 1e-4  # fp32: the same computation, up to kernel rounding


def body(cfg: TransformersConfig, labels: list[str] | None = None) -> Body:
    """The `Body` of a transformers encoder: its model_type and the prefix of its classes (`BertModel` -> `Bert`)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(cfg.model_type)
    if not isinstance(name, str):
        raise EncoderlabError(f"transformers has no stock model class for model_type {cfg.model_type!r}")
    return Body(cfg.model_type, name.removesuffix("Model"), tuple(labels or ()) or None, transformers=True)


def stock_config(stock: Export, cfg: TransformersConfig):
    """The class's config: the folder's, with the task's labels (a head's) and the export's settings."""
    own = {k: v for k, v in cfg.config.items() if not (stock.head and k in LABEL_KEYS)}
    return TransformersConfig(config={**own, **stock.config}, parameters=cfg.parameters).hf_config()


def stock_model(stock: Export, cfg: TransformersConfig) -> nn.Module:
    import transformers

    cls = getattr(transformers, stock.cls, None)
    if cls is None:
        raise EncoderlabError(f"transformers {transformers.__version__} has no {stock.cls}")
    return cls(stock_config(stock, cfg))


def body_keys(stock: Export, cfg: TransformersConfig, model: nn.Module) -> dict[str, str]:
    """Our backbone's parameter -> the class's, or the one-line refusal naming what does not fit."""
    prefix = f"{model.base_model_prefix}." if stock.head else ""  # a bare body (retrieval) is its own base model
    with torch.device("meta"):
        ours = [k.removeprefix("model.") for k in TransformersBody(cfg).state_dict()]
    theirs = set(model.state_dict())
    unfilled = sorted(theirs - {prefix + k for k in ours} - set(stock.head.values()))
    if unfilled:
        raise EncoderlabError(f"{stock.cls} has {len(unfilled)} parameters that the trained body and head do not "
                              f"fill ({_listed(unfilled)}): it computes more than encoderlab's head (one Linear "
                              f"over the last hidden states); {not_saved()}")
    spare = [k for k in ours if prefix + k not in theirs and not k.startswith(UNUSED_MISSING)]
    if spare:
        raise EncoderlabError(f"{stock.cls} has no place for {len(spare)} weights of the trained body "
                              f"({_listed(spare)}); {not_saved()}")
    return {f"model.{k}": prefix + k for k in ours if prefix + k in theirs}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")


def check(stock: Export, cfg: TransformersConfig) -> None:
    """Refuse, before any work, a class that does not hold exactly the run (module docstring)."""
    with torch.device("meta"):
        model = stock_model(stock, cfg)
    body_keys(stock, cfg, model)


def hf_finetuned(stock: Export, cfg: TransformersConfig, backbone: nn.Module, head: nn.Module) -> nn.Module:
    """The stock model holding the run's weights (a strict load), checked to compute what the run does."""
    model = stock_model(stock, cfg).eval()
    keys = body_keys(stock, cfg, model)
    state = {keys[k]: v for k, v in backbone.state_dict().items() if k in keys}
    state.update({stock.head[k]: v for k, v in head.state_dict().items() if k in stock.head})
    model.load_state_dict(state, strict=True)
    model.float()
    verify(model, backbone, head if stock.head else None, cfg)
    return model


def outputs(model: nn.Module, ids, mask):
    out = model(input_ids=ids, attention_mask=mask)
    if hasattr(out, "start_logits"):
        return torch.stack([out.start_logits, out.end_logits], -1)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def verify(model: nn.Module, backbone: nn.Module, head: nn.Module | None, cfg: TransformersConfig) -> None:
    """The stock model's outputs on a small padded batch are those of the trained backbone and head (copied to the
    CPU in fp32, as the stock model is: the trained modules are left as they are)."""
    import copy

    body = TransformersBody(cfg).eval()
    body.load_state_dict({k: v.float().cpu() for k, v in backbone.state_dict().items()})
    head = copy.deepcopy(head).float().cpu().eval() if head is not None else None
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        hidden = body(ids, causal=False, attention_mask=mask)
        ours, theirs = head(hidden) if head is not None else hidden, outputs(model, ids, mask)
    gap = (ours - theirs)[mask.bool()].abs().max().item()
    if not gap <= TOLERANCE * max(1.0, ours.abs().max().item()):
        raise EncoderlabError(f"{type(model).__name__} computes other outputs than the trained model (largest "
                              f"difference {gap:.2g}): not saved")
