"""The model over a slot KV cache (rollout/kv_cache.py): feed chunks to some rows (prefill) or one token to many
(decode), start rows as copies of others, and optionally keep one layer's input at every column (for the update)."""

from __future__ import annotations

import torch

from components.config import RolloutConfig
from components.rollout.kv_cache import SlotCache, WritePlan


class SlotModel:
    """`n` rows of the model's KV cache, each holding one episode's tokens in order (column = token index)."""

    def __init__(self, model, n: int, max_len: int, ec: RolloutConfig, capture_layer: int | None = None):
        self.body, self.head = model.get_decoder(), model.get_output_embeddings()
        self.device = next(model.parameters()).device
        self.n, self.ec = n, ec
        self.cache = SlotCache(model.config.num_hidden_layers, n, max_len)
        self.lens = torch.zeros(n, dtype=torch.long, device=self.device)  # columns written per slot
        self.calls = 0
        self.hidden = None  # with capture_layer: the input of that layer at every column of every slot
        self.hook = None
        if capture_layer is not None:
            dtype = next(model.parameters()).dtype
            self.hidden = torch.zeros(n, max_len, model.config.hidden_size, dtype=dtype, device=self.device)
            self.hook = self.body.layers[capture_layer].register_forward_pre_hook(self._capture)

    def _capture(self, module, args) -> None:
        h, plan = args[0], self.cache.plan
        if plan.rows is None:
            self.hidden[torch.arange(self.n, device=self.device), plan.positions] = h[:, 0].to(self.hidden.dtype)
        else:
            i, j = torch.nonzero(plan.real, as_tuple=True)
            self.hidden[plan.rows[i], plan.positions[i, j]] = h[i, j].to(self.hidden.dtype)

    def close(self) -> None:
        if self.hook is not None:
            self.hook.remove()

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, plan: WritePlan):
        self.cache.plan = plan
        out = self.body(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=self.cache,
                        use_cache=True)  # fmt: skip
        self.calls += 1
        return out.last_hidden_state

    def prefill(self, rows: list[int], chunks: list[list[int]], pad_id: int) -> torch.Tensor:
        """Append `chunks[i]` to slot `rows[i]`; the logits after each chunk's last token. Rows go in groups of
        similar chunk length (`rollout.prefill_bucket`), so short chunks are not padded to the longest one."""
        order = sorted(range(len(rows)), key=lambda i: -len(chunks[i]))
        groups, logits = [[order[0]]], [None] * len(rows)
        for i in order[1:]:
            if len(chunks[i]) < self.ec.prefill_bucket * len(chunks[groups[-1][0]]):
                groups.append([])
            groups[-1].append(i)
        for g in groups:
            for i, row in zip(g, self._prefill([rows[i] for i in g], [chunks[i] for i in g], pad_id)):
                logits[i] = row
        return torch.stack(logits)

    def _prefill(self, rows: list[int], chunks: list[list[int]], pad_id: int) -> torch.Tensor:
        """One padded batch of chunks. Long chunks go through `prefill_tokens // rows` columns at a time (bounds the
        attention scores)."""
        n = max(len(c) for c in chunks)
        ids = torch.full((len(rows), n), pad_id, dtype=torch.long)
        real = torch.zeros(len(rows), n, dtype=torch.bool)
        for i, c in enumerate(chunks):
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            real[i, : len(c)] = True
        ids, real = ids.to(self.device), real.to(self.device)
        slot = torch.tensor(rows, dtype=torch.long, device=self.device)
        lengths = real.sum(-1)
        start = self.lens[slot]
        last = lengths - 1
        hidden = None
        step = max(1, self.ec.prefill_tokens // len(rows))
        every_slot = rows == list(range(self.n))
        for a in range(0, n, step):
            b = min(n, a + step)
            cols = torch.arange(a, b, device=self.device)
            pos = start[:, None] + cols[None, :]  # [rows, b-a]
            width = int((start + lengths.clamp(max=b)).max())
            mask = torch.arange(width, device=self.device)[None, None, :] <= pos[:, :, None]
            h = self._forward(ids[:, a:b], pos, mask[:, None], WritePlan(pos, width, slot, real[:, a:b], every_slot))
            if hidden is None:
                hidden = h.new_zeros(len(rows), h.shape[-1])
            here = torch.nonzero((last >= a) & (last < b)).squeeze(-1)
            hidden[here] = h[here, last[here] - a]
        self.lens[slot] += lengths
        return self.head(hidden).float()

    def decode(self, rows: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
        """Feed one token to each of `rows`; their next-token logits. When most slots take part, the step runs
        over every slot (the others write a pad into their next free column and do not advance), else over
        `rows` alone (their cache rows are gathered)."""
        if len(rows) >= self.ec.full_step_fraction * self.n:
            ids = torch.full((self.n,), pad_id, dtype=torch.long, device=self.device)
            ids[rows] = tokens
            pos = self.lens.clone()
            width = self.cache.step_width(int(pos.max()) + 1)
            mask = torch.arange(width, device=self.device)[None, :] <= pos[:, None]
            h = self._forward(ids[:, None], pos[:, None], mask[:, None, None], WritePlan(pos, width))
            h = h[rows, 0]
        else:
            pos = self.lens[rows]
            width = int(pos.max()) + 1
            mask = torch.arange(width, device=self.device)[None, :] <= pos[:, None]
            real = torch.ones(len(rows), 1, dtype=torch.bool, device=self.device)
            h = self._forward(tokens[:, None], pos[:, None], mask[:, None, None], WritePlan(pos[:, None], width, rows, real))
            h = h[:, 0]
        self.lens[rows] += 1
        return self.head(h).float()

    def keep(self, rows: torch.Tensor) -> None:
        """Shrink to slots `rows` (slot i becomes rows[i])."""
        self.cache.keep_rows(rows)
        if self.hidden is not None:
            self.hidden = self.hidden[rows]
        self.lens = self.lens[rows]
        self.n = len(rows)

    def share(self, src: list[int], dst: list[int]) -> None:
        """Slots `dst` start as copies of slots `src` (episodes of one group share their prompt's prefill)."""
        width = int(self.lens[src].max())
        self.cache.copy_rows(src, dst, width)
        if self.hidden is not None:
            self.hidden[dst, :width] = self.hidden[src, :width]
        self.lens[dst] = self.lens[src]
