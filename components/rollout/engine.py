"""Batched multi-turn rollout with HF transformers, continuously batched.

Every running episode owns one row ("slot") of a KV cache (rollout/slots.py). Each decode step samples the next
token of every row in a model turn, all on tensors. A row whose turn ends waits for its tool call; once enough
rows wait (`RolloutConfig.refill_fraction`), the environment answers all their calls in one batch and their
observation turns are prefilled together, while the other rows keep decoding. A finished episode frees its slot
for the next queued one. Episodes with the same history (a group's prompt, and the same turns since) share one
prefill, copied into their rows.

The contract: the action mask (model tokens 1, everything inserted 0), per-token behaviour log-probs, a turn ends
on the template's end-of-turn ids or its token budget, the observation is inserted through the chat template,
per-turn wall-clock times for traces, and the same episodes from the same (generator seed, questions, rollout
settings); greedy episodes whatever the row budget.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from components.agent.tool_env import ToolEnv
from components.config import AgentConfig, RolloutConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.episodes import PHASES, RolloutStats, record_turn, start_trajectories
from components.rollout.slots import SlotModel
from components.rollout.trajectory import Trajectory
from components.rollout.vllm_engine import VllmEngine, vllm_rollout

__all__ = ["PHASES", "RolloutStats", "rollout"]


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


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """Next tokens, their log-probs and the entropy of each row's distribution (temperature 0 = greedy).

    Sampling inverts each row's CDF at one uniform draw: torch.multinomial draws a random number per vocabulary
    entry (82 ms for 64 rows of SmolLM2's 49,152 on 2 cores, against 1.3 ms)."""
    logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
    probs = logp.exp()
    if temperature <= 0:
        tok = logits.argmax(-1)
    else:
        cdf = probs.cumsum(-1)
        u = torch.rand(len(cdf), 1, generator=generator).to(cdf.device) * cdf[:, -1:] * (1 - 2**-23)
        tok = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # right: a zero-probability token is never drawn
    entropy = torch.special.entr(probs).sum(-1)  # 0 where a probability is 0
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1), entropy



@dataclass
class _Waiting:
    """A slot whose turn ended (its tool call pending), or whose episode was just admitted, waiting for a prefill."""

    slot: int
    episode: int
    chunk: list[int] = field(default_factory=list)  # what the prefill feeds
    turn: tuple[list[int], list[float], int, int] | None = None  # tokens, logprobs, started, ended (ns)


class _Scheduler:
    """Runs the episodes of `trajs` through `slots`: admit, decode, answer tool calls, prefill, until all end."""

    def __init__(self, slots: SlotModel, trajs: list[Trajectory], chat: ChatFormat, env: ToolEnv, cfg: AgentConfig,
                 ec: RolloutConfig, prefill: str, stats: RolloutStats, progress) -> None:  # fmt: skip
        self.slots, self.trajs, self.chat, self.env, self.cfg, self.ec = slots, trajs, chat, env, cfg, ec
        self.prefill, self.prefill_ids = prefill, chat.encode(prefill) if prefill else []
        self.stats, self.progress = stats, progress
        n, device = slots.n, slots.device
        self.clock = _Clock(stats, device)
        self.queue = deque(range(len(trajs)))
        self.free = list(range(n))
        self.owner = [-1] * n  # the trajectory in each slot
        self.waiting: list[_Waiting] = []
        self.logits = torch.zeros(n, 0, device=device)  # each slot's next-token logits (sized at the first prefill)
        self.live = torch.zeros(n, dtype=torch.bool, device=device)  # slots in a model turn
        self.turn_tok = torch.zeros(n, cfg.max_tokens_per_turn, dtype=torch.long, device=device)
        self.turn_lp = torch.zeros(n, cfg.max_tokens_per_turn, device=device)
        self.turn_n = torch.zeros(n, dtype=torch.long, device=device)
        self.budget = torch.zeros(n, dtype=torch.long, device=device)
        self.started = [0] * n
        self.stop_ids = torch.tensor(sorted(chat.stop_ids), dtype=torch.long, device=device)

    def run(self, temperature: float, generator: torch.Generator | None) -> None:
        self.admit()
        while self.waiting or bool(self.live.any()):
            n_live = int(self.live.sum())
            if self.waiting and (not n_live or len(self.waiting) >= self.ec.refill_fraction * (len(self.waiting) + n_live)):
                self.answer_and_prefill()
            else:
                self.decode_step(temperature, generator)

    def admit(self) -> None:
        """Free slots take queued episodes; their prompts wait for the next prefill."""
        while self.free and self.queue:
            s, i = self.free.pop(0), self.queue.popleft()
            self.owner[s], self.slots.lens[s] = i, 0
            self.waiting.append(_Waiting(s, i, list(self.trajs[i].input_ids)))

    def decode_step(self, temperature: float, generator: torch.Generator | None) -> None:
        """Sample the next token of every row in a turn; rows that stop wait; the rest feed their token."""
        st = self.stats
        with self.clock("sample"):
            rows = torch.nonzero(self.live).squeeze(-1)
            tok, lp, ent = _sample(self.logits[rows], temperature, generator)
            self.turn_tok[rows, self.turn_n[rows]] = tok
            self.turn_lp[rows, self.turn_n[rows]] = lp.to(self.turn_lp.dtype)
            self.turn_n[rows] += 1
            stop = torch.isin(tok, self.stop_ids) | (self.turn_n[rows] >= self.budget[rows])
            st.entropy_sum += float(ent.sum())
            st.generated_tokens += len(rows)
        if self.progress is not None:
            self.progress(len(rows), 0)
        with self.clock("bookkeeping"):
            if bool(stop.any()):
                now = time.time_ns()
                for s in rows[stop].tolist():
                    k = int(self.turn_n[s])
                    turn = (self.turn_tok[s, :k].tolist(), self.turn_lp[s, :k].tolist(), self.started[s], now)
                    self.waiting.append(_Waiting(s, self.owner[s], turn=turn))
                    self.live[s] = False
                rows, tok = rows[~stop], tok[~stop]
        if len(rows):
            with self.clock("decode"):
                self.logits[rows] = self.slots.decode(rows, tok, self.chat.pad_id)
                st.decode_steps += 1
                st.fed_rows += len(rows)
                st.row_steps += self.slots.n if len(rows) >= self.ec.full_step_fraction * self.slots.n else len(rows)

    def answer_and_prefill(self) -> None:
        """The tool calls of every waiting turn as one batch, then one prefill of the insertions and new prompts."""
        ended = [w for w in self.waiting if w.turn is not None]
        if ended:
            self.answer(ended)
            self.admit()  # freed slots take queued episodes at once
            self.compact()
        todo = [w for w in self.waiting if w.chunk]
        self.waiting.clear()
        if todo:
            self.prefill_rows(todo)

    def compact(self) -> None:
        """Once nothing is queued and few slots hold episodes, drop the free slots: the busy ones become rows
        0..m-1 (in order), so later steps run over m rows instead of gathering them from n."""
        busy = [s for s in range(self.slots.n) if self.owner[s] >= 0]
        if self.queue or not busy or len(busy) > self.ec.compact_fraction * self.slots.n:
            return
        with self.clock("bookkeeping"):
            new = {s: k for k, s in enumerate(busy)}
            rows = torch.tensor(busy, dtype=torch.long, device=self.slots.device)
            self.slots.keep(rows)
            if self.logits.shape[1]:
                self.logits = self.logits[rows]
            self.live, self.turn_tok, self.turn_lp = self.live[rows], self.turn_tok[rows], self.turn_lp[rows]
            self.turn_n, self.budget = self.turn_n[rows], self.budget[rows]
            self.started = [self.started[s] for s in busy]
            self.owner = [self.owner[s] for s in busy]
            self.free = []
            for w in self.waiting:
                w.slot = new[w.slot] if w.slot in new else -1
            self.waiting = [w for w in self.waiting if w.slot >= 0]
            self.stats.compactions += 1

    def answer(self, ended: list[_Waiting]) -> None:
        with self.clock("tools"):
            t0, tool_start = time.perf_counter(), time.time_ns()
            eps = [self.trajs[w.episode].episode for w in ended]
            results = self.env.step(eps, [self.prefill + self.chat.decode_turn(w.turn[0]) for w in ended])
            self.stats.tool_seconds += time.perf_counter() - t0
            tool_time = (tool_start, time.time_ns())
        done = 0
        with self.clock("bookkeeping"):
            for w, res in zip(ended, results):
                tokens, lps, t_start, t_end = w.turn
                t = self.trajs[w.episode]
                insert = record_turn(t, tokens, lps, ((t_start, t_end), tool_time), res, self.chat, self.env, self.cfg,
                                     self.prefill_ids)  # fmt: skip
                if insert is None:  # the episode ended: its slot is free
                    if self.slots.hidden is not None:
                        t.hidden = self.slots.hidden[w.slot, : len(t.input_ids) - 1].clone()
                    self.owner[w.slot], w.chunk = -1, []
                    self.free.append(w.slot)
                    done += 1
                else:
                    w.chunk = [tokens[-1], *insert]  # the turn's last token was sampled, not yet fed
        if self.progress is not None and done:
            self.progress(0, done)

    def prefill_rows(self, todo: list[_Waiting]) -> None:
        """Feed every waiting chunk. Episodes whose whole history is the same (a group's prompt, and the same turns
        and observations since) feed it once; the others' rows become copies (a prefix cache within the batch)."""
        with self.clock("prefill"):
            first: dict[tuple[int, ...], _Waiting] = {}
            fed, copies = [], []
            for w in todo:
                key = tuple(self.trajs[w.episode].input_ids)  # what the row holds once its chunk is fed
                if key in first:
                    copies.append((first[key].slot, w.slot))
                    continue
                first[key] = w
                fed.append(w)
            out = self.slots.prefill([w.slot for w in fed], [w.chunk for w in fed], self.chat.pad_id)
            self.stats.prefill_tokens += sum(len(w.chunk) for w in fed)
            if self.logits.shape[1] == 0:
                self.logits = out.new_zeros(self.slots.n, out.shape[1])
            self.logits[torch.tensor([w.slot for w in fed], device=out.device)] = out
            if copies:
                src, dst = [s for s, _ in copies], [d for _, d in copies]
                self.slots.share(src, dst)
                self.logits[dst] = self.logits[src]
        now = time.time_ns()
        for w in todo:
            s = w.slot
            self.live[s], self.turn_n[s], self.started[s] = True, 0, now
            room = self.cfg.max_total_tokens - len(self.trajs[w.episode].input_ids)
            self.budget[s] = max(1, min(self.cfg.max_tokens_per_turn, room))


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

    `model` is a transformers model, run by this module's engine, or a `VllmEngine` (rollout/vllm_engine.py),
    whose episodes are seeded by the generator's seed (`capture_layer` needs the transformers engine).
    """
    ec = engine or RolloutConfig()
    if isinstance(model, VllmEngine):
        if capture_layer is not None:
            raise ValueError("capture_layer: vLLM does not return hidden states (train.keep_frozen_hidden needs rollout.engine: hf)")
        seed = generator.initial_seed() if generator is not None else 0
        return vllm_rollout(model, chat, env, questions, cfg, ec, temperature, seed, stats, prompts, prefill, progress)
    t0 = time.perf_counter()
    stats = stats if stats is not None else RolloutStats()
    trajs = start_trajectories(chat, env, questions, prompts, prefill)
    if not trajs:
        return trajs
    was_training = model.training
    model.eval()
    longest = max(len(t.input_ids) for t in trajs)
    max_len = max(cfg.max_total_tokens, longest + cfg.max_tokens_per_turn) + 2
    slots = SlotModel(model, min(len(trajs), ec.max_rows), max_len, ec, capture_layer)
    try:
        _Scheduler(slots, trajs, chat, env, cfg, ec, prefill, stats, progress).run(temperature, generator)
    finally:
        slots.close()  # the capture hook leaves the model
        model.train(was_training)
    stats.forward_calls += slots.calls
    stats.seconds += time.perf_counter() - t0
    return trajs
