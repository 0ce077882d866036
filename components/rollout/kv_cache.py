"""The rollout's KV cache: transformers' dynamic cache, with room to grow.

`DynamicLayer` concatenates every new column onto the whole cache, so each decode step copies all of it. Here each
layer writes into a buffer that doubles when full and hands the model a view of the filled columns.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_CAPACITY = 64  # columns


class GrowingLayer(DynamicLayer):
    """What the rollout needs of a cache layer: append columns, keep rows. Anything else is refused."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buf = self.value_buf = None
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self.key_buf is None or end > self.key_buf.shape[-2]:
            self._grow(key_states, value_states, max(end, 2 * self.length, MIN_CAPACITY))
        self.key_buf[..., self.length : end, :] = key_states
        self.value_buf[..., self.length : end, :] = value_states
        self.length = end
        return self._view()

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, capacity: int) -> None:
        shape = (*key_states.shape[:-2], capacity, key_states.shape[-1])
        keys, values = key_states.new_empty(shape), value_states.new_empty(shape)
        if self.length:
            keys[..., : self.length, :], values[..., : self.length, :] = self.keys, self.values
        self.key_buf, self.value_buf = keys, values

    def _view(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = self.key_buf[..., : self.length, :], self.value_buf[..., : self.length, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self.key_buf, self.value_buf = self.key_buf[indices], self.value_buf[indices]
            self._view()

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("GrowingLayer only appends columns and keeps rows")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("GrowingLayer only appends columns and keeps rows")


def growing_cache() -> Cache:
    return Cache(layer_class_to_replicate=GrowingLayer)
