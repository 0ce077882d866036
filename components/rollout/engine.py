"""Batched multi-turn rollout with HF transformers, continuously batched.

Every running episode owns one row ("slot") of a KV cache (rollout/kv_cache.py). Each decode step samples the next
token of every row in a model turn, all on tensors. A row whose turn ends waits for its tool call; once enough
rows wait (`RolloutConfig.refill_fraction`), the environment answers all their calls in one batch and their
observation turns are prefilled together, while the other rows keep decoding. A finished episode frees its slot
for the next queued one. A group's episodes share one prompt prefill, copied into their rows.

The contract: the action mask (model tokens 1, everything inserted 0), per-token behaviour log-probs, a turn ends
on the template's end-of-turn ids or its token budget, the observation is inserted through the chat template,
per-turn wall-clock times for traces, and the same episodes from the same (generator seed, questions).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from components.agent.env import StepResult, ToolEnv
from components.config import AgentConfig, RolloutConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.kv_cache import SlotCache, WritePlan
from components.rollout.trajectory import Trajectory

PHASES = ("prefill", "decode", "sample", "bookkeeping", "tools")


@dataclass
class RolloutStats:
    seconds: float = 0.0
    tool_seconds: float = 0.0
    generated_tokens: int = 0
    prefill_tokens: int = 0  # prompt and observation tokens fed (a shared prompt counts once)
    forward_calls: int = 0
    decode_steps: int = 0
    row_steps: int = 0  # rows computed over all decode steps (idle rows included)
    entropy_sum: float = 0.0  # of the sampling distribution, over every sampled token
    phase_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @property
    def entropy(self) -> float:
        return self.entropy_sum / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


class _Clock:
    """Adds the wall time of each `with clock("phase")` block to stats.phase_seconds (CUDA work is awaited)."""

    def __init__(self, stats: RolloutStats, device: torch.device):
        self.stats, self.cuda = stats, device.type == "cuda"
        self.phase, self.t = None, 0.0

    def __call__(self, phase: str):
        self.phase = phase
        return self

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        self.stats.phase_seconds[self.phase] += time.perf_counter() - self.t


class _Slots:
    """The model over a SlotCache: feed chunks to some rows (prefill) or one token to many (decode)."""

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
        """Append `chunks[i]` to slot `rows[i]`; the logits after each chunk's last token. Long chunks go through
        `prefill_tokens // rows` columns at a time (bounds the attention scores)."""
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
        for a in range(0, n, step):
            b = min(n, a + step)
            cols = torch.arange(a, b, device=self.device)
            pos = start[:, None] + cols[None, :]  # [rows, b-a]
            width = int((start + lengths.clamp(max=b)).max())
            mask = torch.arange(width, device=self.device)[None, None, :] <= pos[:, :, None]
            h = self._forward(ids[:, a:b], pos, mask[:, None], WritePlan(pos, width, slot, real[:, a:b]))
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
            width = int(pos.max()) + 1
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

    def share(self, src: list[int], dst: list[int]) -> None:
        """Slots `dst` start as copies of slots `src` (episodes of one group share their prompt's prefill)."""
        width = int(self.lens[src].max())
        self.cache.copy_rows(src, dst, width)
        if self.hidden is not None:
            self.hidden[dst, :width] = self.hidden[src, :width]
        self.lens[dst] = self.lens[src]


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
class _Waiting:
    """A slot whose turn ended (or whose episode was just admitted), waiting to be prefilled."""

    slot: int
    episode: int
    chunk: list[int] = field(default_factory=list)
    fresh: bool = False  # a new episode: the chunk is its prompt
    turn: tuple[list[int], list[float], int, int] | None = None  # tokens, logprobs, started, ended (ns)


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
    engine: RolloutConfig | None = None,
    capture_layer: int | None = None,
) -> list[Trajectory]:
    """Run one episode per question (repeat questions for a group) and return their trajectories, in order.

    `prompts` replaces the rendered prompt ids (e.g. naive RAG's prompt with an observation already in it);
    `prefill` is text the environment writes at the start of every model turn (e.g. "<answer>" for the
    direct-answer baseline): it has mask 0 and is parsed as part of the turn. `progress(new_tokens,
    finished_episodes)` is called after every decode step and every tool step. With `capture_layer`, each
    trajectory keeps the input of that decoder layer at every position but its last (`Trajectory.hidden`).
    """
    ec = engine or RolloutConfig()
    t0 = time.perf_counter()
    stats = stats if stats is not None else RolloutStats()
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    clock = _Clock(stats, device)
    prefill_ids = chat.encode(prefill) if prefill else []
    trajs = []
    for n, q in enumerate(questions):
        prompt = list(prompts[n]) if prompts is not None else chat.prompt_ids(q.question)
        t = Trajectory(env.reset(q), prompt_len=len(prompt))
        t.add(prompt, is_action=False)
        t.add(prefill_ids, is_action=False)
        trajs.append(t)
    if not trajs:
        return trajs
    n_slots = min(len(trajs), ec.max_rows)
    longest = max(len(t.input_ids) for t in trajs)
    slots = _Slots(model, n_slots, max(cfg.max_total_tokens, longest + cfg.max_tokens_per_turn) + 2, ec, capture_layer)
    max_turn = cfg.max_tokens_per_turn
    stop_ids = torch.tensor(sorted(chat.stop_ids), dtype=torch.long, device=device)

    queue = deque(range(len(trajs)))
    free = list(range(n_slots))
    owner = [-1] * n_slots  # trajectory of each slot
    waiting: list[_Waiting] = []  # turn ended: tool call and insertion pending
    logits = torch.zeros(n_slots, 0, device=device)  # next-token logits of each slot (sized at first prefill)
    live = torch.zeros(n_slots, dtype=torch.bool, device=device)  # slots in a model turn
    turn_tok = torch.zeros(n_slots, max_turn, dtype=torch.long, device=device)
    turn_lp = torch.zeros(n_slots, max_turn, device=device)
    turn_n = torch.zeros(n_slots, dtype=torch.long, device=device)
    budget = torch.zeros(n_slots, dtype=torch.long, device=device)
    started = [0] * n_slots

    def admit() -> None:
        while free and queue:
            s, i = free.pop(0), queue.popleft()
            owner[s], slots.lens[s] = i, 0
            waiting.append(_Waiting(s, i, list(trajs[i].input_ids), fresh=True))

    def feed_waiting() -> None:
        """Tool calls of every waiting turn as one batch, then one prefill of their insertions (and prompts)."""
        nonlocal logits
        ended = [w for w in waiting if w.turn is not None]
        if ended:
            with clock("tools"):
                tt, tool_start = time.perf_counter(), time.time_ns()
                results = env.step([trajs[w.episode].episode for w in ended],
                                   [prefill + chat.decode_turn(w.turn[0]) for w in ended])  # fmt: skip
                stats.tool_seconds += time.perf_counter() - tt
                tool_time = (tool_start, time.time_ns())
            done = 0
            with clock("bookkeeping"):
                for w, res in zip(ended, results):
                    tokens, lps, t_start, t_end = w.turn
                    insert = record_turn(trajs[w.episode], tokens, lps, ((t_start, t_end), tool_time), res, chat,
                                         env, cfg, prefill_ids)  # fmt: skip
                    if insert is None:
                        if slots.hidden is not None:
                            trajs[w.episode].hidden = slots.hidden[w.slot, : len(trajs[w.episode].input_ids) - 1].clone()
                        owner[w.slot], w.chunk = -1, []
                        free.append(w.slot)
                        done += 1
                    else:
                        w.chunk = [tokens[-1], *insert]  # the turn's last token was sampled, not yet fed
            if progress is not None and done:
                progress(0, done)
            admit()  # freed slots take queued episodes at once
        todo = [w for w in waiting if w.chunk]
        waiting.clear()
        if not todo:
            return
        with clock("prefill"):
            # a group's episodes share their prompt: prefill each distinct chunk of new episodes once
            first: dict[tuple[int, ...], _Waiting] = {}
            fed, copies = [], []
            for w in todo:
                key = tuple(w.chunk) if w.fresh else None
                if key is not None and key in first:
                    copies.append((first[key].slot, w.slot))
                else:
                    if key is not None:
                        first[key] = w
                    fed.append(w)
            out = slots.prefill([w.slot for w in fed], [w.chunk for w in fed], chat.pad_id)
            stats.prefill_tokens += sum(len(w.chunk) for w in fed)
            if logits.shape[1] == 0:
                logits = out.new_zeros(n_slots, out.shape[1])
            idx = torch.tensor([w.slot for w in fed], dtype=torch.long, device=device)
            logits[idx] = out
            if copies:
                src, dst = [s for s, _ in copies], [d for _, d in copies]
                slots.share(src, dst)
                logits[dst] = logits[src]
        now = time.time_ns()
        for w in todo:
            s, t = w.slot, trajs[w.episode]
            live[s], turn_n[s] = True, 0
            budget[s] = max(1, min(max_turn, cfg.max_total_tokens - len(t.input_ids)))
            started[s] = now

    try:
        admit()
        while waiting or bool(live.any()):  # every episode has ended when no slot waits or decodes
            n_live = int(live.sum())
            if waiting and (not n_live or len(waiting) >= ec.refill_fraction * (len(waiting) + n_live)):
                feed_waiting()
                continue
            with clock("sample"):
                rows = torch.nonzero(live).squeeze(-1)
                tok, lp, ent = _sample(logits[rows], temperature, generator)
                turn_tok[rows, turn_n[rows]] = tok
                turn_lp[rows, turn_n[rows]] = lp.to(turn_lp.dtype)
                turn_n[rows] += 1
                stop = torch.isin(tok, stop_ids) | (turn_n[rows] >= budget[rows])
                stats.entropy_sum += float(ent.sum())
                stats.generated_tokens += len(rows)
            if progress is not None:
                progress(len(rows), 0)
            with clock("bookkeeping"):
                if bool(stop.any()):
                    now = time.time_ns()
                    for s in rows[stop].tolist():
                        k = int(turn_n[s])
                        turn = (turn_tok[s, :k].tolist(), turn_lp[s, :k].tolist(), started[s], now)
                        waiting.append(_Waiting(s, owner[s], turn=turn))
                        live[s] = False
                    rows, tok = rows[~stop], tok[~stop]
            if len(rows):
                with clock("decode"):
                    logits[rows] = slots.decode(rows, tok, chat.pad_id)
                    stats.decode_steps += 1
                    stats.row_steps += slots.n if len(rows) >= ec.full_step_fraction * slots.n else len(rows)
    finally:
        slots.close()  # the capture hook leaves the model
    stats.forward_calls += slots.calls
    stats.seconds += time.perf_counter() - t0
    model.train(was_training)
    return trajs


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
