"""Document masks on GPU through `flex_attention`: a block-sparse kernel that skips the blocks no document spans.

SDPA's CUDA kernels either take no arbitrary mask (flash) or compute every block of one (memory-efficient), so a
packed window of many short documents costs the full T^2. `flex_attention` with a `BlockMask` built from the
document ids computes only the blocks on the block diagonal (and below it, for causal attention); the mask is built
once per forward and shared by every layer. Its fused kernel comes from compiling flex_attention, which the model
never does itself (DESIGN.md convention 5): the trainer passes the compiled function in (`train.attention`,
train/distributed.py). Without it flex_attention runs its slow eager reference, used in tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from torch import Tensor


@dataclass
class FlexPlan:
    block_mask: object  # torch.nn.attention.flex_attention.BlockMask
    kernel: Callable | None  # the compiled flex_attention, or None for the eager reference


def plan_flex(doc_ids: Tensor, causal: bool, kernel: Callable | None = None) -> FlexPlan:
    """The BlockMask of packed windows: a query sees the keys of its own document (and only earlier ones if causal)."""
    from torch.nn.attention.flex_attention import create_block_mask

    B, T = doc_ids.shape

    def same_document(b, h, q, kv):
        allowed = doc_ids[b, q] == doc_ids[b, kv]
        return allowed & (q >= kv) if causal else allowed

    return FlexPlan(create_block_mask(same_document, B, None, T, T, device=doc_ids.device), kernel)


def flex_attention(q: Tensor, k: Tensor, v: Tensor, plan: FlexPlan) -> Tensor:
    """q (B, H, T, D), k and v (B, Hkv, T, D) -> (B, H, T, D), with the plan's kernel."""
    from torch.nn.attention.flex_attention import flex_attention as eager_flex

    kernel = plan.kernel or eager_flex
    return kernel(q, k, v, block_mask=plan.block_mask, enable_gqa=k.shape[1] != q.shape[1])
