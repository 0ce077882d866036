"""The rollout's growing KV cache holds exactly what transformers' dynamic cache holds, through growth and row drops."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from components.rollout.kv_cache import MIN_CAPACITY, growing_cache


def test_growing_cache_matches_the_dynamic_cache_through_growth_and_row_selection():
    gen = torch.Generator().manual_seed(0)
    ours, ref = growing_cache(), DynamicCache()
    rows = 6
    widths = [5, 1, 1, MIN_CAPACITY, 1, 3, 2 * MIN_CAPACITY + 7, 1]  # prefill, decode steps, inserts; grows twice
    for step, width in enumerate(widths):
        for layer in range(2):
            k, v = (torch.randn(rows, 4, width, 8, generator=gen) for _ in range(2))
            got, want = ours.update(k, v, layer), ref.update(k, v, layer)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), (step, layer)
        assert ours.get_seq_length() == ref.get_seq_length() == sum(widths[: step + 1])
        if step in (2, 5):  # finished episodes leave the batch
            keep = torch.tensor([0, 2, 3, 5][: rows - 1])
            ours.batch_select_indices(keep)
            ref.batch_select_indices(keep)
            rows = len(keep)
    assert all(torch.equal(a, b) for la, lb in zip(ours.layers, ref.layers) for a, b in ((la.keys, lb.keys), (la.values, lb.values)))
    assert ours.layers[0].key_buf.shape[-2] >= ours.get_seq_length()
