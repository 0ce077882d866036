"""Grouped-query attention without copying the KV cache: transformers' SDPA path with `enable_gqa` always on.

transformers' `sdpa` attention repeats every key/value head to the query heads (`repeat_kv`) whenever a mask is
given, which the rollout always gives: at 64 rows that copy of the whole cache, in every layer of every decode
step, cost more than the rest of the step. torch's SDPA takes the grouped heads as they are (`enable_gqa`), with
the same result. A decode step (one query token a row) runs as two plain matmuls over the grouped heads instead,
which CPUs compute faster than SDPA's single-query kernel. Registered as the attention implementation "sdpa_gqa"
(docs/benchmarks.md, rollout).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "sdpa_gqa"


def grouped_decode(query, key, value, attention_mask, scaling: float | None):
    """One query token a row as two matmuls over the grouped heads: query head h reads key/value head
    h // (H / KV), as repeat_kv orders them. Softmax in fp32; masked columns get the lowest float, not -inf, so a
    row with every column masked gives no NaN. On CPUs this is faster than SDPA's single-query kernel: 10-13x in
    bf16 on a Zen 4 EPYC, 1.1-1.4x in fp32 (benchmarks/bench_attention.py)."""
    b, h, _, d = query.shape
    kv, t = key.shape[1], key.shape[2]
    scale = scaling if scaling is not None else d**-0.5
    scores = torch.matmul(query.reshape(b, kv, h // kv, d), key.transpose(-1, -2)).float() * scale
    if attention_mask is not None:
        mask = attention_mask[:, :, :, :t].reshape(attention_mask.shape[0], 1, 1, t)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
        else:
            scores = scores + mask.float()
    out = torch.matmul(scores.softmax(-1).to(value.dtype), value)  # [B, KV, H / KV, D]
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous()


def sdpa_gqa_forward(module: torch.nn.Module, query, key, value, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, is_causal: bool | None = None, **kwargs):  # fmt: skip
    if key.shape[1] == query.shape[1]:  # no grouping: transformers' own path
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    if query.shape[2] == 1 and dropout == 0.0 and (attention_mask is None or attention_mask.shape[1] == 1):
        return grouped_decode(query, key, value, attention_mask, scaling), None
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
