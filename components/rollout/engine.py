"""Batched multi-turn rollout with HF transformers.

All episodes share one KV cache. Each turn the active episodes decode together token by token; then the
environment runs every tool call of the batch at once, finished episodes leave the cache (the active set
shrinks), and the inserted observation turns are prefilled into the cache for the rest. Rows of different
lengths are handled with holes in the attention mask and explicit position ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from components.agent.env import ToolEnv
from components.config import AgentConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.trajectory import Trajectory

PREFILL_CHUNK = 512  # columns of a prefill per forward: bounds attention scores (rows x chunk x cache width)


@dataclass
class RolloutStats:
    seconds: float = 0.0
    tool_seconds: float = 0.0
    generated_tokens: int = 0
    forward_calls: int = 0
    entropy_sum: float = 0.0  # of the sampling distribution, over every sampled token

    @property
    def entropy(self) -> float:
        return self.entropy_sum / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


class _Batch:
    """The active rows' shared state: KV cache, attention mask over the cache, next position per row."""

    def __init__(self, model, device, prefill_chunk: int = PREFILL_CHUNK):
        self.model, self.device, self.prefill_chunk = model, device, prefill_chunk
        self.body, self.head = model.get_decoder(), model.get_output_embeddings()
        self.cache = DynamicCache()
        self.attn = torch.zeros(0, 0, dtype=torch.long, device=device)
        self.next_pos = torch.zeros(0, dtype=torch.long, device=device)
        self.calls = 0

    def feed(self, chunks: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Append a right-padded chunk per row; returns the logits after each row's last real token.

        The chunk goes through the decoder body `prefill_chunk` columns at a time and the output head runs on
        each row's last real position only: full logits (rows x length x vocab) would dwarf the KV cache.
        """
        n = max(len(c) for c in chunks)
        ids = torch.full((len(chunks), n), pad_id, dtype=torch.long)
        mask = torch.zeros(len(chunks), n, dtype=torch.long)
        for i, c in enumerate(chunks):
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, : len(c)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        if self.attn.shape[0] == 0:
            self.attn = torch.zeros(len(chunks), 0, dtype=torch.long, device=self.device)
            self.next_pos = torch.zeros(len(chunks), dtype=torch.long, device=self.device)
        positions = self.next_pos[:, None] + (mask.cumsum(-1) - 1).clamp(min=0)
        lengths = mask.sum(-1)
        last = (lengths - 1).clamp(min=0)
        hidden = None
        for a in range(0, n, self.prefill_chunk):
            b = min(n, a + self.prefill_chunk)
            self.attn = torch.cat([self.attn, mask[:, a:b]], dim=1)
            out = self.body(input_ids=ids[:, a:b], attention_mask=self.attn, position_ids=positions[:, a:b],
                            past_key_values=self.cache, use_cache=True)  # fmt: skip
            self.calls += 1
            h = out.last_hidden_state
            here = (last >= a) & (last < b)
            if hidden is None:
                hidden = h.new_zeros(len(chunks), h.shape[-1])
            rows = torch.nonzero(here).squeeze(-1)
            hidden[rows] = h[rows, last[rows] - a]
        self.next_pos = self.next_pos + lengths
        return self.head(hidden).float()

    def keep(self, rows: list[int]) -> None:
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(idx)
        self.attn, self.next_pos = self.attn[idx], self.next_pos[idx]


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """Next tokens, their log-probs and the entropy of each row's distribution (temperature 0 = greedy)."""
    logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
    if temperature <= 0:
        tok = logits.argmax(-1)
    else:
        tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1), entropy


@torch.no_grad()
def rollout(
    model,
    chat: ChatFormat,
    env: ToolEnv,
    questions: Sequence[Question],
    cfg: AgentConfig,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    stats: RolloutStats | None = None,
    prompts: Sequence[list[int]] | None = None,
    prefill: str = "",
    progress: Callable[[int, int], None] | None = None,
    prefill_chunk: int = PREFILL_CHUNK,
) -> list[Trajectory]:
    """Run one episode per question (repeat questions for a group) and return their trajectories.

    `prompts` replaces the rendered prompt ids (e.g. naive RAG's prompt with an observation already in it);
    `prefill` is text the environment writes at the start of every model turn (e.g. "<answer>" for the
    direct-answer baseline): it has mask 0 and is parsed as part of the turn. `progress(new_tokens,
    finished_episodes)` is called after every decode step and every turn.
    """
    t0 = time.perf_counter()
    stats = stats if stats is not None else RolloutStats()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    trajs = []
    prefill_ids = chat.encode(prefill) if prefill else []
    for n, q in enumerate(questions):
        ep = env.reset(q)
        prompt = list(prompts[n]) if prompts is not None else chat.prompt_ids(q.question)
        t = Trajectory(ep, prompt_len=len(prompt))
        t.add(prompt, is_action=False)
        t.add(prefill_ids, is_action=False)
        trajs.append(t)
    active = list(range(len(trajs)))
    batch = _Batch(model, device, prefill_chunk)
    logits = batch.feed([trajs[i].input_ids for i in active], chat.pad_id)
    unfed: dict[int, list[int]] = {}

    while active:
        # 1. decode one turn for every active row
        gen: dict[int, list[int]] = {i: [] for i in active}
        gen_lp: dict[int, list[float]] = {i: [] for i in active}
        live = torch.ones(len(active), dtype=torch.bool)
        budget = [cfg.max_total_tokens - len(trajs[i].input_ids) for i in active]
        turn_start = time.time_ns()
        turn_end = {i: turn_start for i in active}  # when each row's turn stopped (for traces)
        for step in range(cfg.max_tokens_per_turn):
            tok, lp, ent = _sample(logits, temperature, generator)
            tok, lp = tok.cpu(), lp.cpu()
            sampled = live.clone()
            stats.entropy_sum += float(ent.cpu()[sampled].sum())
            for r, i in enumerate(active):
                if live[r]:
                    gen[i].append(int(tok[r]))
                    gen_lp[i].append(float(lp[r]))
                    if int(tok[r]) in chat.stop_ids or len(gen[i]) >= budget[r]:
                        live[r] = False
                        turn_end[i] = time.time_ns()
            stats.generated_tokens += int(sampled.sum())
            if progress is not None:
                progress(int(sampled.sum()), 0)
            if not live.any() or step == cfg.max_tokens_per_turn - 1:
                now = time.time_ns()
                for r, i in enumerate(active):  # the last sampled token is fed with the next insertion
                    if sampled[r]:
                        unfed[i] = [gen[i][-1]]
                    if live[r]:
                        turn_end[i] = now
                break
            feed = [[int(tok[r])] if sampled[r] else [chat.pad_id] for r in range(len(active))]
            logits = _feed_masked(batch, feed, sampled, chat.pad_id)

        # 2. the environment answers every turn at once (tool calls batched per tool)
        tt, tool_start = time.perf_counter(), time.time_ns()
        results = env.step([trajs[i].episode for i in active], [prefill + chat.decode_turn(gen[i]) for i in active])
        stats.tool_seconds += time.perf_counter() - tt
        tool_end = time.time_ns()

        # 3. record the turn; build the insertion for episodes that go on
        keep, chunks = [], []
        for r, (i, res) in enumerate(zip(active, results)):
            t = trajs[i]
            start = len(t.input_ids)
            t.add(gen[i], is_action=True, logprobs=gen_lp[i])
            t.turn_spans.append((start, len(t.input_ids)))
            t.turn_times.append((turn_start, turn_end[i]))
            t.tool_times.append((tool_start, tool_end))
            if res.reward:
                t.rewards[_closing_index(t, start, chat.tool_close_id)] += res.reward
            ended_with_eos = chat.ended_with_eos(gen[i])
            if not res.done:
                insert = chat.insert_ids(res.observation, ended_with_eos) + tuple(prefill_ids)
                if len(t.input_ids) + len(insert) + 1 > cfg.max_total_tokens:
                    env.truncate(t.episode)
                else:
                    t.add(insert, is_action=False)
                    keep.append(r)
                    chunks.append(unfed.pop(i, []) + list(insert))
                    continue
            unfed.pop(i, None)
            t.rewards[t.last_action_index()] += t.episode.outcome
        if progress is not None:
            progress(0, len(active) - len(keep))
        active = [active[r] for r in keep]
        if active:
            batch.keep(keep)
            logits = batch.feed(chunks, chat.pad_id)

    stats.forward_calls += batch.calls
    stats.seconds += time.perf_counter() - t0
    model.train(was_training)
    return trajs


def _feed_masked(batch: _Batch, feed: list[list[int]], real: torch.Tensor, pad_id: int) -> torch.Tensor:
    """One decode step: rows whose turn already ended feed a masked pad (a hole)."""
    if bool(real.all()):
        return batch.feed(feed, pad_id)
    ids = torch.tensor([f[0] for f in feed], dtype=torch.long, device=batch.device)[:, None]
    mask = real.to(batch.device).long()[:, None]
    positions = batch.next_pos[:, None]
    batch.attn = torch.cat([batch.attn, mask], dim=1)
    out = batch.model(input_ids=ids, attention_mask=batch.attn, position_ids=positions,
                      past_key_values=batch.cache, use_cache=True)  # fmt: skip
    batch.calls += 1
    batch.next_pos = batch.next_pos + mask[:, 0]
    return out.logits[:, -1].float()


def _closing_index(t: Trajectory, start: int, tool_close_id: int | None) -> int:
    """The token that closes the turn's tool call (`</tool_call>`), else the turn's last token."""
    end = len(t.input_ids)
    if tool_close_id is not None:
        for j in range(start, end):
            if t.input_ids[j] == tool_close_id:
                return j
    return end - 1
