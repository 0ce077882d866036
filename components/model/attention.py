"""Grouped-query attention without copying the KV cache: transformers' SDPA path with `enable_gqa` always on.

transformers' `sdpa` attention repeats every key/value head to the query heads (`repeat_kv`) whenever a mask is
given, which the rollout always gives: at 64 rows that copy of the whole cache, in every layer of every decode
step, cost more than the rest of the step. torch's SDPA takes the grouped heads as they are (`enable_gqa`), with
the same result. Registered as the attention implementation "sdpa_gqa" (docs/benchmarks.md, rollout).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "sdpa_gqa"


def sdpa_gqa_forward(module: torch.nn.Module, query, key, value, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, is_causal: bool | None = None, **kwargs):  # fmt: skip
    if key.shape[1] == query.shape[1]:  # no grouping: transformers' own path
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    causal = query.shape[2] > 1 and attention_mask is None and (is_causal if is_causal is not None else True)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, sdpa_gqa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def attention_for(setting: str, device: torch.device) -> str:
    """`model.attention`: "auto" is sdpa_gqa on CPU and transformers' sdpa on GPUs (their fused kernels)."""
    if setting == "auto":
        return NAME if device.type == "cpu" else "sdpa"
    return setting
