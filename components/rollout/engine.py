"""Batched multi-turn rollout with HF transformers.

All episodes share one KV cache (rollout/kv_cache.py); a prompt is prefilled once and copied to the episodes that
share it (a group).
Each turn the active episodes decode together token by token; then the environment runs every tool call of the
batch at once, finished episodes leave the cache (the active set shrinks), and the inserted observation turns are
prefilled into the cache for the rest. Rows of different lengths are handled with holes in the attention mask and
explicit position ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from components.agent.env import StepResult, ToolEnv
from components.config import AgentConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.kv_cache import growing_cache
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
        self.cache = growing_cache()
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

    def feed_prompts(self, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """`feed` each distinct prompt once (a group's episodes share theirs), then copy it to its rows."""
        first: dict[tuple[int, ...], int] = {}
        rows = [first.setdefault(tuple(p), len(first)) for p in prompts]
        logits = self.feed(list(first), pad_id)
        if len(first) == len(rows):
            return logits
        self.keep(rows)
        return logits[rows]

    def feed_masked(self, feed: list[list[int]], real: torch.Tensor, pad_id: int, need: torch.Tensor) -> torch.Tensor:
        """One decode step: rows whose turn already ended feed a masked pad (a hole). The output head runs on the
        `need` rows only (those that sample next); the others get uniform logits, drawn from and ignored."""
        ids = torch.tensor([f[0] for f in feed], dtype=torch.long, device=self.device)[:, None]
        mask = real.to(self.device).long()[:, None]
        self.attn = torch.cat([self.attn, mask], dim=1)
        out = self.body(input_ids=ids, attention_mask=self.attn, position_ids=self.next_pos[:, None],
                        past_key_values=self.cache, use_cache=True)  # fmt: skip
        self.calls += 1
        self.next_pos = self.next_pos + mask[:, 0]
        hidden = out.last_hidden_state[:, -1]
        rows = torch.nonzero(need.to(self.device)).squeeze(-1)
        logits = torch.zeros(len(feed), self.head.out_features, device=self.device)
        logits[rows] = self.head(hidden[rows]).float()
        return logits

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


@dataclass
class Turn:
    """One decoded turn of each active row."""

    tokens: list[list[int]]
    logprobs: list[list[float]]
    unfed: list[list[int]]  # the last sampled token, when it is still to be fed (with the next insertion)
    started: int  # wall clock (ns) when the turn's decode began
    ended: list[int]  # wall clock (ns) when each row stopped (for traces)


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
    was_training = model.training
    model.eval()
    prefill_ids = chat.encode(prefill) if prefill else []
    trajs = []
    for n, q in enumerate(questions):
        ep = env.reset(q)
        prompt = list(prompts[n]) if prompts is not None else chat.prompt_ids(q.question)
        t = Trajectory(ep, prompt_len=len(prompt))
        t.add(prompt, is_action=False)
        t.add(prefill_ids, is_action=False)
        trajs.append(t)
    active = list(range(len(trajs)))
    batch = _Batch(model, next(model.parameters()).device, prefill_chunk)
    logits = batch.feed_prompts([t.input_ids for t in trajs], chat.pad_id)
    while active:
        budgets = [cfg.max_total_tokens - len(trajs[i].input_ids) for i in active]
        turn = decode_turn(batch, logits, chat, budgets, cfg.max_tokens_per_turn, temperature, generator, stats,
                           progress)  # fmt: skip
        tt, tool_start = time.perf_counter(), time.time_ns()  # the environment answers every turn at once
        results = env.step([trajs[i].episode for i in active], [prefill + chat.decode_turn(g) for g in turn.tokens])
        stats.tool_seconds += time.perf_counter() - tt
        tool_time = (tool_start, time.time_ns())
        keep, chunks = [], []
        for r, (i, res) in enumerate(zip(active, results)):
            times = (turn.started, turn.ended[r]), tool_time
            insert = record_turn(trajs[i], turn.tokens[r], turn.logprobs[r], times, res, chat, env, cfg, prefill_ids)
            if insert is not None:
                keep.append(r)
                chunks.append(turn.unfed[r] + list(insert))
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


def decode_turn(batch: _Batch, logits: torch.Tensor, chat: ChatFormat, budgets: list[int], max_tokens: int,
                temperature: float, generator: torch.Generator | None, stats: RolloutStats,
                progress: Callable[[int, int], None] | None = None) -> Turn:  # fmt: skip
    """Sample a turn for every row of `batch`, one token per step for all rows together. A row stops at a stop
    id or at its token budget and feeds holes until every row has stopped (or `max_tokens`)."""
    n = len(budgets)
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    live = torch.ones(n, dtype=torch.bool)
    sampled = live
    started = time.time_ns()
    ended = [started] * n
    for step in range(max_tokens):
        tok, lp, ent = _sample(logits, temperature, generator)
        sampled = live.clone()
        stats.entropy_sum += float(ent.cpu()[sampled].sum())
        toks, lps = tok.tolist(), lp.tolist()
        for r in torch.nonzero(sampled).squeeze(-1).tolist():
            tokens[r].append(toks[r])
            logprobs[r].append(lps[r])
            if toks[r] in chat.stop_ids or len(tokens[r]) >= budgets[r]:
                live[r] = False
                ended[r] = time.time_ns()
        stats.generated_tokens += int(sampled.sum())
        if progress is not None:
            progress(int(sampled.sum()), 0)
        if not live.any() or step == max_tokens - 1:
            break
        feed = [[toks[r]] if s else [chat.pad_id] for r, s in enumerate(sampled.tolist())]
        logits = batch.feed_masked(feed, sampled, chat.pad_id, live)
    now, live_rows, fed = time.time_ns(), live.tolist(), sampled.tolist()
    ended = [now if live_rows[r] else ended[r] for r in range(n)]  # rows cut at max_tokens end now
    return Turn(tokens, logprobs, [[g[-1]] if fed[r] else [] for r, g in enumerate(tokens)], started, ended)


Span = tuple[int, int]


def record_turn(t: Trajectory, tokens: list[int], logprobs: list[float], times: tuple[Span, Span], res: StepResult,
                chat: ChatFormat, env: ToolEnv, cfg: AgentConfig, prefill_ids: list[int]) -> tuple[int, ...] | None:
    """Append a model turn (mask 1), its (decode, tool) wall-clock times and process reward; then the environment's
    insertion (mask 0), returned to be fed, if the episode goes on and fits in `max_total_tokens`; else the
    outcome on the last action token."""
    start = len(t.input_ids)
    t.add(tokens, is_action=True, logprobs=logprobs)
    t.turn_spans.append((start, len(t.input_ids)))
    t.turn_times.append(times[0])
    t.tool_times.append(times[1])
    if res.reward:
        t.rewards[_closing_index(t, start, chat.tool_close_id)] += res.reward
    if not res.done:
        insert = chat.insert_ids(res.observation, chat.ended_with_eos(tokens)) + tuple(prefill_ids)
        if len(t.input_ids) + len(insert) + 1 <= cfg.max_total_tokens:
            t.add(insert, is_action=False)
            return insert
        env.truncate(t.episode)
    t.rewards[t.last_action_index()] += t.episode.outcome
    return None


def _closing_index(t: Trajectory, start: int, tool_close_id: int | None) -> int:
    """The token that closes the turn's tool call (`</tool_call>`), else the turn's last token."""
    end = len(t.input_ids)
    if tool_close_id is not None:
        for j in range(start, end):
            if t.input_ids[j] == tool_close_id:
                return j
    return end - 1
