"""The rollout's KV cache: one fixed row ("slot") per running episode, written in place at each row's own length.

Rows never share a column layout, so there are no padding holes and nothing is concatenated per token: a decode
step writes one column per row at that row's length; a prefill writes a few rows' new tokens and reads those rows
back (`plan`). Attention sees columns [0, width) with a mask per row (the engine builds it). The buffer grows by
`MIN_WIDTH` columns at a time, up to the engine's `max_len`, and a step over every slot attends over the whole
buffer (`SlotCache.step_width`): a narrower slice of it is not one strided batch, and CPU matmuls copy such a slice
of the whole cache in every layer (about twice the attention's own time at 700 columns, docs/rollout-engine.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

MIN_WIDTH = 64  # columns; the buffer's width is a multiple of it


def grown(current: int, needed: int, max_len: int) -> int:
    """The buffer width that holds `needed` columns: `current` when it does, else `needed` rounded up."""
    if needed <= current:
        return current
    return min(max_len, -(-needed // MIN_WIDTH) * MIN_WIDTH)


@dataclass
class WritePlan:
    """Where the next forward's key/value columns go, shared by every layer.

    `rows` is None for a step over every slot (one new column each, at `positions[row]`); otherwise the forward
    runs over these rows only, and token (i, j) of its input goes to column positions[i, j] of slot rows[i]
    where `real[i, j]` (padding is not written). `width` columns are handed to attention."""

    positions: torch.Tensor
    width: int
    rows: torch.Tensor | None = None
    real: torch.Tensor | None = None
    every_slot: bool = False  # rows are every slot, in order: attention reads the buffer without gathering it


class SlotLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, cache: SlotCache):
        super().__init__()
        self.cache = cache

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        c = self.cache
        shape = (c.slots, key_states.shape[1], grown(0, c.plan.width, c.max_len), key_states.shape[-1])
        self.keys = key_states.new_zeros(shape)
        self.values = value_states.new_zeros(shape)
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        plan = self.cache.plan
        if plan.width > self.keys.shape[2]:
            self._grow(plan.width)
        if plan.rows is None:  # one column per slot, attending over the whole buffer
            if plan.width != self.keys.shape[2]:
                raise ValueError(f"a step over every slot must attend over the whole buffer "
                                 f"({self.keys.shape[2]} columns, from SlotCache.step_width), not {plan.width}")  # fmt: skip
            slots = torch.arange(self.keys.shape[0], device=self.keys.device)
            self.keys[slots, :, plan.positions] = key_states[:, :, 0]
            self.values[slots, :, plan.positions] = value_states[:, :, 0]
            return self.keys, self.values
        i, j = torch.nonzero(plan.real, as_tuple=True)
        rows, cols = plan.rows[i], plan.positions[i, j]
        self.keys[rows, :, cols] = key_states[i, :, j]
        self.values[rows, :, cols] = value_states[i, :, j]
        if plan.every_slot:
            return self.keys[:, :, : plan.width], self.values[:, :, : plan.width]
        return self.keys[plan.rows, :, : plan.width], self.values[plan.rows, :, : plan.width]

    def _grow(self, width: int) -> None:
        new = grown(self.keys.shape[2], width, self.cache.max_len)
        keys = self.keys.new_zeros((*self.keys.shape[:2], new, self.keys.shape[-1]))
        values = self.values.new_zeros(keys.shape)
        keys[:, :, : self.keys.shape[2]] = self.keys
        values[:, :, : self.values.shape[2]] = self.values
        self.keys, self.values = keys, values

    def copy_rows(self, src: torch.Tensor, dst: torch.Tensor, width: int) -> None:
        self.keys[dst, :, :width] = self.keys[src, :, :width]
        self.values[dst, :, :width] = self.values[src, :, :width]

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.keys, self.values = self.keys[rows], self.values[rows]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.cache.plan.width, 0

    def get_seq_length(self) -> int:
        return self.cache.plan.width if self.cache.plan is not None else 0

    def get_max_cache_shape(self) -> int:
        return self.cache.max_len


class SlotCache(Cache):
    """`slots` rows of at most `max_len` columns in every layer; the engine sets `plan` before each forward."""

    def __init__(self, num_layers: int, slots: int, max_len: int):
        self.slots, self.max_len = slots, max_len
        self.plan: WritePlan | None = None
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])

    def step_width(self, needed: int) -> int:
        """The columns a step over every slot attends over when its rows need `needed`: the buffer's width after
        it grows to hold them."""
        layer = self.layers[0]
        return grown(layer.keys.shape[2] if layer.is_initialized else 0, needed, self.max_len)

    def copy_rows(self, src: list[int], dst: list[int], width: int) -> None:
        """Slots `dst` get the first `width` columns of slots `src` (episodes that share a prompt)."""
        for layer in self.layers:
            if layer.is_initialized:
                device = layer.keys.device
                layer.copy_rows(torch.tensor(src, device=device), torch.tensor(dst, device=device), width)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Shrink to `rows`, in this order (row i becomes rows[i])."""
        for layer in self.layers:
            if layer.is_initialized:
                layer.keep_rows(rows)
        self.slots = len(rows)
