"""The rollout's slot cache: each row holds exactly its own sequence of key/value columns, whatever mix of
prefills (some rows, padded chunks), full decode steps (every row), subset decode steps and row copies wrote it."""

from __future__ import annotations

import pytest
import torch

from components.rollout.kv_cache import MIN_WIDTH, SlotCache, WritePlan

ROWS, HEADS, DIM, LAYERS = 5, 2, 4, 2


def _kv(n: int, t: int, gen: torch.Generator):
    return torch.randn(n, HEADS, t, DIM, generator=gen), torch.randn(n, HEADS, t, DIM, generator=gen)


def test_every_row_holds_its_own_columns_through_prefills_steps_copies_and_growth():
    gen = torch.Generator().manual_seed(0)
    cache = SlotCache(LAYERS, ROWS, max_len=4 * MIN_WIDTH)
    want = [[[] for _ in range(ROWS)] for _ in range(LAYERS)]  # layer -> row -> list of (k, v) columns
    lens = [0] * ROWS

    def prefill(rows: list[int], chunk_lens: list[int]):
        t = max(chunk_lens)
        real = torch.tensor([[j < n for j in range(t)] for n in chunk_lens])
        pos = torch.tensor([[lens[r] + j for j in range(t)] for r in rows])
        width = max(lens[r] + n for r, n in zip(rows, chunk_lens))
        cache.plan = WritePlan(pos, width, torch.tensor(rows), real)
        for layer in range(LAYERS):
            k, v = _kv(len(rows), t, gen)
            got_k, got_v = cache.update(k, v, layer)
            for i, (r, n) in enumerate(zip(rows, chunk_lens)):
                want[layer][r] += [(k[i, :, j], v[i, :, j]) for j in range(n)]
                assert torch.equal(got_k[i, :, : lens[r] + n], torch.stack([c[0] for c in want[layer][r]], 1))
        for r, n in zip(rows, chunk_lens):
            lens[r] += n

    def step_all(advance: list[int]):
        pos = torch.tensor(lens)
        cache.plan = WritePlan(pos, cache.step_width(max(lens) + 1))
        for layer in range(LAYERS):
            k, v = _kv(ROWS, 1, gen)
            got_k, got_v = cache.update(k, v, layer)
            # the whole buffer, as one strided batch: attention's matmuls read it without copying it
            assert got_k.data_ptr() == cache.layers[layer].keys.data_ptr() and got_k.is_contiguous()
            assert got_v.data_ptr() == cache.layers[layer].values.data_ptr() and got_v.is_contiguous()
            for r in advance:
                want[layer][r].append((k[r, :, 0], v[r, :, 0]))
        for r in advance:
            lens[r] += 1

    prefill([0, 1, 2, 3, 4], [3, 7, 1, 5, 2])  # padded chunk
    step_all(advance=[0, 1, 2, 3, 4])
    step_all(advance=[1, 3])  # the other rows write a pad into their next column and do not advance
    prefill([2], [1])  # a subset step of one row
    prefill([0, 4], [MIN_WIDTH + 9, 40])  # grows the buffer
    cache.copy_rows([0], [2], lens[0])
    lens[2] = lens[0]
    for layer in range(LAYERS):
        want[layer][2] = list(want[layer][0])
    step_all(advance=[0, 1, 2, 3, 4])
    assert cache.layers[0].keys.shape[2] == 2 * MIN_WIDTH  # grown to the next multiple of MIN_WIDTH, no further
    for layer in range(LAYERS):
        for r in range(ROWS):
            keys = cache.layers[layer].keys[r, :, : lens[r]]
            values = cache.layers[layer].values[r, :, : lens[r]]
            assert torch.equal(keys, torch.stack([c[0] for c in want[layer][r]], 1)), (layer, r)
            assert torch.equal(values, torch.stack([c[1] for c in want[layer][r]], 1)), (layer, r)


def test_a_step_over_every_slot_refuses_a_width_other_than_the_buffers():
    cache = SlotCache(LAYERS, ROWS, max_len=4 * MIN_WIDTH)
    cache.plan = WritePlan(torch.zeros(ROWS, dtype=torch.long), cache.step_width(1))
    cache.update(*_kv(ROWS, 1, torch.Generator().manual_seed(0)), 0)
    cache.plan = WritePlan(torch.ones(ROWS, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"whole buffer \(64 columns"):
        cache.update(*_kv(ROWS, 1, torch.Generator().manual_seed(1)), 0)
