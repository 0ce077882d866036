"""Format priming of the tiny model: teaches the syntax of the agent loop, never the policy.

Two kinds of language-modelling data:
- transcripts with the right syntax whose every query is "<an entity already in the context> <a relation
  named in the question>", with a random number of searches, and whose answer is a random entity from the
  context. No gold label is read, so they do not follow the gold chain except by chance: RL has to find it.
  Only the model's turns are targets, exactly as the rollout engine tokenizes them. Each batch cuts
  transcripts after a random model turn, so every turn's choices get the same weight at a fraction of the cost.
  Each random draw is trained against the uniform distribution over what it was drawn from;
- optionally the corpus itself (every token a target), separate and down-weighted (`model.tiny.priming.corpus_weight`, 0 in
  the CPU profile: its random facts starve the copy-from-context signal; docs/design-choices.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from components.agent.observation import format_hits
from components.agent.parser import answer_text, call_text
from components.config import PrimingConfig
from components.data.schema import Passage, Question
from components.data.synthetic import words
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat


@dataclass
class Sequence_:
    ids: list[int]
    targets: list[int]  # 1 where the token is a training target
    turn_ends: list[int] | None = None  # end of each model turn: a batch may cut the transcript after any of them
    # position -> the token ids the transcript drew that token from (an entity of the context, a relation of
    # the question): its target is the uniform distribution over them, the expected loss of the random draw
    choices: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def cut(self, rng: random.Random, first_turn: bool = False) -> Sequence_:
        """The transcript up to a random model turn (or its first): short, dense sequences."""
        if not self.turn_ends:
            return self
        end = self.turn_ends[0] if first_turn else rng.choice(self.turn_ends)
        return Sequence_(self.ids[:end], self.targets[:end], None, {i: c for i, c in self.choices.items() if i < end})


class _Choices:
    """Single-token ids of entity and relation names, to mark where a transcript made a random draw."""

    def __init__(self, chat: ChatFormat, names: set[str]):
        self.ids = {n: ids[0] for n in names if len(ids := chat.encode(n)) == 1}

    def mark(self, seq: dict[int, tuple[int, ...]], act: list[int], offset: int, picks: list[tuple[str, list[str]]]):
        """For each (chosen name, names it was drawn from): the chosen token's position in `act` -> candidates."""
        start = 0
        for chosen, pool in picks:
            tid = self.ids.get(chosen)
            cands = tuple(sorted({self.ids[n] for n in pool if n in self.ids}))
            if tid is None or tid not in act[start:] or len(cands) < len(set(pool)):
                continue  # a multi-token name: keep the hard target
            pos = act.index(tid, start)
            seq[offset + pos] = cands
            start = pos + 1


def make_transcripts(
    questions: Sequence[Question],
    entities: set[str],
    relations: set[str],
    backend: SearchBackend,
    alias: str,
    top_k: int,
    chat: ChatFormat,
    max_turns: int,
    rng: random.Random,
) -> list[Sequence_]:
    """One transcript per question; searches of all transcripts run in batches, turn by turn."""
    out: list[Sequence_] = []
    states = []
    marks = _Choices(chat, entities | relations)
    for q in questions:
        qwords = words(q.question)
        rels = sorted({w for w in qwords if w in relations})
        ctx = list(dict.fromkeys(w for w in qwords if w in entities))
        if not rels or not ctx:
            continue
        ids = chat.prompt_ids(q.question)
        n_search = rng.randint(1, max(1, max_turns - 1))
        states.append({"ids": ids, "targets": [0] * len(ids), "rels": rels, "ctx": ctx, "left": n_search,
                       "ends": [], "choices": {}})  # fmt: skip
    for _turn in range(max_turns):
        todo = [s for s in states if s["left"] > 0]
        if not todo:
            break
        picks = [(rng.choice(s["ctx"]), rng.choice(s["rels"])) for s in todo]
        hit_lists = backend.search(alias, [f"{e} {r}" for e, r in picks], top_k)
        for s, (e, r), hits in zip(todo, picks, hit_lists):
            act = chat.encode(call_text(f"{e} {r}")) + [chat.eos_id]
            marks.mark(s["choices"], act, len(s["ids"]), [(e, s["ctx"]), (r, s["rels"])])
            obs = format_hits(hits) if hits else "No results."
            ins = list(chat.insert_ids(obs, True))
            s["ends"].append(len(s["ids"]) + len(act))
            s["ids"] += act + ins
            s["targets"] += [1] * len(act) + [0] * len(ins)
            for h in hits:
                s["ctx"] += [w for w in words(f"{h.title} {h.text}") if w in entities and w not in s["ctx"]]
            s["left"] -= 1
    for s in states:
        a = rng.choice(s["ctx"])
        act = chat.encode(answer_text(a)) + [chat.eos_id]
        marks.mark(s["choices"], act, len(s["ids"]), [(a, s["ctx"])])
        ids = s["ids"] + act
        out.append(Sequence_(ids, s["targets"] + [1] * len(act), s["ends"] + [len(ids)], s["choices"]))
    return out


def corpus_chunks(passages: Sequence[Passage], chat: ChatFormat, length: int, rng: random.Random) -> list[Sequence_]:
    """The corpus as LM text: shuffled passages joined by newlines, cut into chunks of about `length` tokens."""
    order = list(passages)
    rng.shuffle(order)
    out, cur = [], []
    for p in order:
        cur += chat.encode(f"{p.title}: {p.text}\n")
        if len(cur) >= length:
            out.append(Sequence_(cur[:length], [1] * length))
            cur = []
    return out


def _target_logprobs(model, batch: list[Sequence_], pad_id: int, device):
    """Log-softmax at every target position of a right-padded batch, one row per target (row-major order),
    the target ids, and a (batch, length) map from a sequence position to its row (-1: not a target)."""
    n = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), n), pad_id, dtype=torch.long)
    attn = torch.zeros(len(batch), n, dtype=torch.long)
    tgt = torch.zeros(len(batch), n, dtype=torch.bool)
    for i, s in enumerate(batch):
        ids[i, : len(s.ids)] = torch.tensor(s.ids)
        attn[i, : len(s.ids)] = 1
        tgt[i, : len(s.ids)] = torch.tensor(s.targets, dtype=torch.bool)
    tgt[:, 0] = False
    ids, attn, tgt = ids.to(device), attn.to(device), tgt.to(device)
    hidden = model.base_model(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1]
    sel = tgt[:, 1:]
    logp = torch.log_softmax(model.get_output_embeddings()(hidden[sel]).float(), -1)  # only where there is a target
    where = torch.full(tgt.shape, -1, dtype=torch.long, device=device)
    where[tgt] = torch.arange(int(sel.sum()), device=device)
    return logp, ids[tgt], where


def _choice_index(batch: list[Sequence_], where: torch.Tensor):
    """Rows of the random draws, their candidate ids (padded) and the padding mask."""
    rows, cands = [], []
    for i, s in enumerate(batch):
        for pos, c in s.choices.items():
            if where[i, pos] >= 0:
                rows.append(int(where[i, pos]))
                cands.append(c)
    width = max((len(c) for c in cands), default=1)
    cand = torch.tensor([list(c) + [c[0]] * (width - len(c)) for c in cands] or [[0]], device=where.device)
    mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in cands] or [[0.0]], device=where.device)
    return torch.tensor(rows, dtype=torch.long, device=where.device), cand[: len(rows)], mask[: len(rows)]


def _lm_loss_sum(model, batch: list[Sequence_], pad_id: int, device) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the target tokens and their count; at a random draw, against the
    uniform distribution over what it was drawn from (the draw's expected loss, without its sampling noise)."""
    logp, targets, where = _target_logprobs(model, batch, pad_id, device)
    tok = logp.gather(1, targets[:, None]).squeeze(1)
    rows, cand, mask = _choice_index(batch, where)
    if len(rows):
        tok = tok.index_copy(0, rows, (logp[rows].gather(1, cand) * mask).sum(1) / mask.sum(1))
    return -tok.sum(), len(tok)


def lm_step(model, batch: list[Sequence_], pad_id: int, device, micro_size: int | None = None) -> torch.Tensor:
    """Mean loss over the batch's target tokens (see `_lm_loss_sum`). With `micro_size`, the sequences run in
    micro-batches of similar length, so little compute goes to padding; the loss is the same."""
    parts = [_lm_loss_sum(model, micro, pad_id, device) for micro in _by_length(batch, micro_size)]
    return sum(loss for loss, _ in parts) / max(1, sum(n for _, n in parts))


def _by_length(batch: list[Sequence_], micro_size: int | None) -> list[list[Sequence_]]:
    """`batch` in micro-batches of `micro_size` sequences of similar length (one micro-batch without a size)."""
    order = sorted(batch, key=lambda s: len(s.ids))
    size = micro_size or len(order)
    return [order[i : i + size] for i in range(0, len(order), size)]


def sft_step(model, opt, params, batch: list[Sequence_], pad_id: int, device, amp, micro_size: int | None,
             max_grad_norm: float) -> float:  # fmt: skip
    """One optimizer step on `lm_step`'s loss over `batch` under `amp` (an autocast context), gradients of `params`
    clipped to `max_grad_norm`; returns the loss. Each micro-batch (`_by_length`, as in `lm_step`) is backpropagated as
    it is computed, so only one micro-batch's activations are held; the summed gradients are then divided by the
    batch's target count, which gives `lm_step`'s gradient."""
    opt.zero_grad(set_to_none=True)
    total, count = 0.0, 0
    for micro in _by_length(batch, micro_size):
        with amp:
            loss, n = _lm_loss_sum(model, micro, pad_id, device)
        loss.backward()
        total, count = total + float(loss.detach()), count + n
    for p in params:
        if p.grad is not None:
            p.grad.div_(max(1, count))
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    opt.step()
    return total / max(1, count)


@torch.no_grad()
def probe(model, probes: list[Sequence_], pad_id: int, device) -> dict[str, float]:
    """How well the format is primed, on held-out transcripts, each draw counted as right when it is any of
    its candidates: `first_call_p`, the geometric-mean probability of writing a right first call; `choice_p`,
    that of drawing from the right candidates after the first turn (context entities); `choice_kl`, how far
    those later draws are from uniform over their candidates (a bias, e.g. to the question's entity, shows here)."""
    model.eval()
    logp, targets, where = _target_logprobs(model, probes, pad_id, device)
    tok = logp.gather(1, targets[:, None]).squeeze(1)
    rows, cand, mask = _choice_index(probes, where)
    cand_logp = logp[rows].gather(1, cand)
    ok = torch.logsumexp(cand_logp + torch.log(mask), 1)
    # KL(uniform over the candidates || model), the part of the soft loss above its floor log|candidates|
    kl = -(cand_logp * mask).sum(1) / mask.sum(1) - torch.log(mask.sum(1))
    tok = tok.index_copy(0, rows, ok)
    kl_at = torch.zeros_like(tok).index_copy(0, rows, kl)
    first, later, later_kl = [], [], []
    for i, s in enumerate(probes):
        end = s.turn_ends[0] if s.turn_ends else len(s.ids)
        first.append(sum(float(tok[where[i, j]]) for j in range(1, end) if where[i, j] >= 0))
        later += [float(tok[where[i, j]]) for j in s.choices if j >= end and where[i, j] >= 0]
        later_kl += [float(kl_at[where[i, j]]) for j in s.choices if j >= end and where[i, j] >= 0]
    model.train()
    gmean = lambda xs: math.exp(sum(xs) / len(xs)) if xs else float("nan")  # noqa: E731
    return {"first_call_p": gmean(first), "choice_p": gmean(later),
            "choice_kl": sum(later_kl) / len(later_kl) if later_kl else float("nan")}  # fmt: skip


@dataclass
class PrimeResult:
    losses: list[float]
    first_turn_steps: int
    full_steps: int
    scores: dict[str, float]


def prime(model, transcripts: list[Sequence_], probes: list[Sequence_], chunks: list[Sequence_], pc: PrimingConfig,
          pad_id: int, rng: random.Random, log=None) -> PrimeResult:  # fmt: skip
    """AdamW at a constant LR, in two phases, each until its probe passes (or its step cap).

    1. First turns only (question -> first query): the choice there is a copy from the question, and the
       copy-from-context mechanism forms on it. Ends when the probe's first-call p reaches `first_call_p`.
    2. Whole transcripts, cut after a random turn: the same copy, now from observations too, and unlearning
       phase 1's bias to the question's entity. Ends when the probe's choice KL is down to `choice_kl`.
       An optional, down-weighted corpus LM term rides along.
    """
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=pc.lr, weight_decay=0.01)
    model.train()
    losses: list[float] = []
    phases = ((lambda sc: sc["first_call_p"] >= pc.first_call_p, pc.first_turn_steps, True),
              (lambda sc: sc["choice_kl"] <= pc.choice_kl, pc.steps, False))  # fmt: skip
    done, scores = [], probe(model, probes, pad_id, device)
    bar = tqdm(total=pc.first_turn_steps + pc.steps, desc="format priming", leave=False)
    for passed, cap, first in phases:
        n = 0
        while n < cap and not passed(scores):
            loss = lm_step(model, [t.cut(rng, first) for t in rng.sample(transcripts, pc.batch_size)],
                           pad_id, device, pc.micro_batch_size)  # fmt: skip
            if chunks and pc.corpus_weight > 0 and not first:
                # separate and down-weighted: its random-fact targets must not drown the copy signal
                batch = rng.sample(chunks, max(1, pc.batch_size // 8))
                loss = loss + pc.corpus_weight * lm_step(model, batch, pad_id, device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            n += 1
            bar.update()
            if n % pc.probe_every == 0 or n == cap:
                scores = probe(model, probes, pad_id, device)
                bar.set_postfix({k: f"{v:.2f}" for k, v in scores.items()})
                if log is not None:
                    log({"prime/loss": losses[-1], **{f"prime/{k}": v for k, v in scores.items()}}, len(losses))
        done.append(n)
    bar.close()
    model.eval()
    return PrimeResult(losses, done[0], done[1], scores)
