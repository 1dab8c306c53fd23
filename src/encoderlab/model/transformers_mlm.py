"""A transformers masked-LM model (BERT, RoBERTa, DeBERTa, ModernBERT, DistilBERT, ...) trained by encoderlab's
pretraining loop: `TransformersMaskedLM` is called as `TransformerLM` is for a loss,
`model(input_ids, causal=False, doc_ids=..., output_positions=..., targets=...)` -> (summed cross-entropy, rows
predicted right), and holds transformers' own modules under their own names, so that its state dict is the
model's (a checkpoint's `model.safetensors` loads in `AutoModelForMaskedLM`).

Packed windows hold several documents; each must attend only to itself. Two ways, chosen once per model by
`choose_layout` from what the model computes, never from its name:
- `mask`: the whole window in one row, with a (B, 1, T, T) block mask and positions restarting at each document
  (offset as the model's own positions start: RoBERTa's after its padding index). Taken only when a document's hidden
  states in the window equal its hidden states alone, and do not move when another document of the window changes.
- `rows`: each document its own row, right-padded, with the model's usual 2-D padding mask. Any encoder computes this
  as it was trained to; it pads, so it costs more.
The LM head runs only on the predicted rows where the model applies it to each position alone (checked the same way),
else on every position and the predicted rows are taken from its output.
"""
from __future__ import annotations

import inspect
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoderlab.model.transformers_body import TransformersConfig, first_position

Layout = Literal["mask", "rows"]
PROBE_TOLERANCE = 1e-4  # relative, fp32: the same computation in another order lands near 1e-7


class TransformersMaskedLM(nn.Module):
    def __init__(self, cfg: TransformersConfig, hf_model: nn.Module | None = None) -> None:
        super().__init__()
        from transformers import AutoModelForMaskedLM

        hf = hf_model if hf_model is not None else AutoModelForMaskedLM.from_config(cfg.hf_config(),
                                                                                    trust_remote_code=False)
        own = [n for n, _ in hf.named_parameters(recurse=False)] + [n for n, _ in hf.named_buffers(recurse=False)]
        if own:
            raise ValueError(f"{type(hf).__name__} keeps tensors outside its submodules ({own[0]})")
        for name, child in hf.named_children():  # the same modules: names and weights are the model's own
            self.add_module(name, child)
        self.__dict__["hf"] = hf  # not a submodule (its children are ours): its forward and save_pretrained
        self.config = cfg
        self.layout: Layout = "rows"
        self.head_at_rows = False
        accepted = inspect.signature(hf.base_model.forward).parameters
        self._takes_positions = "position_ids" in accepted
        self._position_offset = first_position(hf.base_model)
        self._pad_id = hf.config.pad_token_id if hf.config.pad_token_id is not None else 0
        # Whether training draws random numbers outside the loop's own generators (the loop seeds them per step).
        self.dropout = any(isinstance(m, nn.Dropout) and m.p > 0 for m in hf.modules()) or any(
            isinstance(v, float) and v > 0 for k, v in hf.config.to_dict().items() if "dropout" in k)

    @property
    def blocks(self) -> nn.ModuleList:
        """The model's list of layers (the longest `ModuleList` in it): what compile and FSDP2 wrap one by one."""
        lists = [m for m in self.modules() if isinstance(m, nn.ModuleList)]
        return max(lists, key=len)

    # ---- the forward of a training step --------------------------------------------------------------------

    def forward(self, input_ids: Tensor, causal: bool = False, doc_ids: Tensor | None = None,
                output_positions: Tensor | None = None, targets: Tensor | None = None):
        if causal:
            raise ValueError(f"a {self.config.model_type} masked-LM model attends both ways: it cannot train CLM")
        if doc_ids is None:
            doc_ids = torch.zeros_like(input_ids)
        B, T = input_ids.shape
        if output_positions is None:
            output_positions = torch.arange(B * T, device=input_ids.device)
        elif output_positions.dtype == torch.bool:
            output_positions = output_positions.reshape(-1).nonzero()[:, 0]
        logits = self._logits_at(input_ids, doc_ids, output_positions)
        if targets is None:
            return logits
        logits = logits.float()
        loss = F.cross_entropy(logits, targets, reduction="sum")
        correct = (logits.gather(1, targets[:, None]) >= logits.amax(-1, keepdim=True)).sum()
        return loss, correct

    def _logits_at(self, input_ids: Tensor, doc_ids: Tensor, positions: Tensor) -> Tensor:
        """(N, V) logits at `positions`, 1-D indices into the flattened (B, T) window."""
        kwargs, flat_index = self._inputs(input_ids, doc_ids)
        index = flat_index[positions] if flat_index is not None else positions
        if not self.head_at_rows:
            out = self.hf(**kwargs).logits  # (rows, L, V)
            return out.reshape(-1, out.shape[-1])[index]

        def only_rows(_module, _args, output):
            hidden = output[0]
            output["last_hidden_state"] = hidden.reshape(-1, hidden.shape[-1])[index][None]
            return output

        hook = self.hf.base_model.register_forward_hook(only_rows)
        try:
            return self.hf(**kwargs).logits[0]
        finally:
            hook.remove()

    def _inputs(self, input_ids: Tensor, doc_ids: Tensor) -> tuple[dict, Tensor | None]:
        """The model's keyword inputs for the window, and where each window position's row lands in the flattened
        (rows, L) output (None: the window's own layout)."""
        from encoderlab.model.transformer import positions_from_doc_ids

        within = positions_from_doc_ids(doc_ids)  # (B, T): each token's position in its document
        if self.layout == "mask":
            mask = (doc_ids[:, :, None] == doc_ids[:, None, :])[:, None]  # (B, 1, T, T)
            kwargs = {"input_ids": input_ids, "attention_mask": mask}
            if self._takes_positions:
                kwargs["position_ids"] = within + self._position_offset
            return kwargs, None
        B, T = input_ids.shape
        starts = within.reshape(-1) == 0
        row = starts.cumsum(0) - 1  # each token's document, numbered over the whole batch
        rows, length = int(row[-1]) + 1, int(within.max()) + 1
        j = within.reshape(-1)
        ids = input_ids.new_full((rows, length), self._pad_id)
        ids[row, j] = input_ids.reshape(-1)
        mask = torch.zeros((rows, length), dtype=torch.long, device=input_ids.device)
        mask[row, j] = 1
        return {"input_ids": ids, "attention_mask": mask}, row * length + j

    # ---- choosing how documents stay apart ------------------------------------------------------------------

    @torch.no_grad()
    def choose_layout(self, vocab_ids: list[int], doc_length: int, generator: torch.Generator) -> str:
        """Set `layout` and `head_at_rows` from what the model computes on two documents of `doc_length` tokens
        (ids drawn from `vocab_ids`); return the line the run's log says."""
        was_training = self.training
        self.eval()
        try:
            pick = torch.tensor(vocab_ids)
            a, b = (pick[torch.randint(len(pick), (1, doc_length), generator=generator)] for _ in range(2))
            b2 = pick[torch.randint(len(pick), (1, doc_length), generator=generator)]
            window = torch.cat([a, b], 1)
            docs = torch.cat([torch.zeros_like(a), torch.ones_like(b)], 1)
            self.layout = "mask"
            isolated = self._mask_keeps_documents_apart(window, b2, docs, a, b)
            if not isolated:
                self.layout = "rows"
            self.head_at_rows = self._head_is_per_position(window, docs)
        finally:
            self.train(was_training)
        how = ("one row per window, each document masked from the others" if self.layout == "mask" else
               "each document in its own padded row (the model does not take a block mask and positions per "
               "document as computing the document alone)")
        head = "at the masked positions only" if self.head_at_rows else "at every position"
        return f"{self.config.model_type}: documents stay apart by {how}; the LM head runs {head}"

    def _hidden(self, input_ids: Tensor, doc_ids: Tensor) -> Tensor:
        kwargs, flat_index = self._inputs(input_ids, doc_ids)
        hidden = self.hf.base_model(**kwargs)[0]
        hidden = hidden.reshape(-1, hidden.shape[-1])
        return hidden[flat_index] if flat_index is not None else hidden

    def _mask_keeps_documents_apart(self, window: Tensor, other_b: Tensor, docs: Tensor, a: Tensor, b: Tensor) -> bool:
        try:
            packed = self._hidden(window, docs)
            changed = self._hidden(torch.cat([a, other_b], 1), docs)
        except Exception:  # a model that refuses a 4-D mask or position ids
            return False
        n = a.shape[1]
        alone = [self.hf.base_model(input_ids=x)[0][0] for x in (a, b)]
        return all(_close(x, y) for x, y in ((packed[:n], alone[0]), (packed[n:], alone[1]), (changed[:n], packed[:n])))

    def _head_is_per_position(self, window: Tensor, docs: Tensor) -> bool:
        positions = torch.tensor([1, window.shape[1] - 2])
        self.head_at_rows = False
        everywhere = self._logits_at(window, docs, positions)
        self.head_at_rows = True
        try:
            at_rows = self._logits_at(window, docs, positions)
        except Exception:
            return False
        return at_rows.shape == everywhere.shape and _close(at_rows, everywhere)


def _close(x: Tensor, y: Tensor) -> bool:
    return x.shape == y.shape and bool((x - y).abs().max() <= PROBE_TOLERANCE * y.abs().max().clamp_min(1e-6))
