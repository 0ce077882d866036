"""Format priming of the tiny model: teaches the syntax of the agent loop, never the policy.

Two kinds of language-modelling data:
- the corpus itself (every token is a target), so entity names and facts' wording are known tokens;
- transcripts with the right syntax whose every query is "<an entity already in the context> <a relation
  named in the question>", with a random number of searches, and whose answer is a random entity from the
  context. No gold label is read, so they do not follow the gold chain except by chance: RL has to find it.
  Only the model's turns are targets, exactly as the rollout engine tokenizes them. Each batch cuts
  transcripts after a random model turn, so every turn's choices get the same weight at a fraction of the cost.

The corpus term is separate and down-weighted, and absent in the first-turn phase: its targets (random facts)
are high-loss noise that starves the copy-from-context signal the format needs (measured: with corpus text
mixed into the batches, queries after 700 steps still picked context entities at chance rate; without it the
copy forms in ~250 steps).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from components.agent.observation import format_hits
from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN, TOOL_CLOSE, TOOL_OPEN
from components.data.schema import Passage, Question
from components.data.synthetic import words
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat


def call_text(query: str) -> str:
    return TOOL_OPEN + json.dumps({"name": "search", "arguments": {"query": query}}) + TOOL_CLOSE


def answer_text(answer: str) -> str:
    return ANSWER_OPEN + answer + ANSWER_CLOSE


@dataclass
class Sequence_:
    ids: list[int]
    targets: list[int]  # 1 where the token is a training target
    turn_ends: list[int] | None = None  # end of each model turn: a batch may cut the transcript after any of them

    def cut(self, rng: random.Random, first_turn: bool = False) -> Sequence_:
        """The transcript up to a random model turn (or its first): short, dense sequences."""
        if not self.turn_ends:
            return self
        end = self.turn_ends[0] if first_turn else rng.choice(self.turn_ends)
        return Sequence_(self.ids[:end], self.targets[:end])


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
    for q in questions:
        qwords = words(q.question)
        rels = [w for w in qwords if w in relations]
        ctx = [w for w in qwords if w in entities]
        if not rels or not ctx:
            continue
        ids = chat.prompt_ids(q.question)
        n_search = rng.randint(1, max(1, max_turns - 1))
        states.append({"ids": ids, "targets": [0] * len(ids), "rels": rels, "ctx": ctx, "left": n_search, "ends": []})
    for _turn in range(max_turns):
        todo = [s for s in states if s["left"] > 0]
        if not todo:
            break
        queries = [f"{rng.choice(s['ctx'])} {rng.choice(s['rels'])}" for s in todo]
        hit_lists = backend.search(alias, queries, top_k)
        for s, query, hits in zip(todo, queries, hit_lists):
            act = chat.encode(call_text(query)) + [chat.eos_id]
            obs = format_hits(hits) if hits else "No results."
            ins = list(chat.insert_ids(obs, True))
            s["ends"].append(len(s["ids"]) + len(act))
            s["ids"] += act + ins
            s["targets"] += [1] * len(act) + [0] * len(ins)
            for h in hits:
                s["ctx"] += [w for w in words(f"{h.title} {h.text}") if w in entities and w not in s["ctx"]]
            s["left"] -= 1
    for s in states:
        act = chat.encode(answer_text(rng.choice(s["ctx"]))) + [chat.eos_id]
        ids = s["ids"] + act
        out.append(Sequence_(ids, s["targets"] + [1] * len(act), s["ends"] + [len(ids)]))
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


def lm_step(model, batch: list[Sequence_], pad_id: int, device) -> torch.Tensor:
    """Mean next-token cross-entropy over target tokens of a right-padded batch."""
    n = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), n), pad_id, dtype=torch.long)
    attn = torch.zeros(len(batch), n, dtype=torch.long)
    tgt = torch.zeros(len(batch), n, dtype=torch.bool)
    for i, s in enumerate(batch):
        ids[i, : len(s.ids)] = torch.tensor(s.ids)
        attn[i, : len(s.ids)] = 1
        tgt[i, : len(s.ids)] = torch.tensor(s.targets, dtype=torch.bool)
    ids, attn, tgt = ids.to(device), attn.to(device), tgt.to(device)
    hidden = model.base_model(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1]
    sel = tgt[:, 1:]
    logits = model.get_output_embeddings()(hidden[sel]).float()  # only where there is a target
    return torch.nn.functional.cross_entropy(logits, ids[:, 1:][sel])


def prime(model, transcripts: list[Sequence_], chunks: list[Sequence_], steps: int, batch_size: int, lr: float,
          corpus_weight: float, pad_id: int, rng: random.Random, log=None, first_turn_share: float = 0.0) -> list[float]:  # fmt: skip
    """AdamW, constant LR, then cosine decay after the first-turn phase; returns the loss curve.

    The first `first_turn_share` of the steps see only first turns (question -> first query), whose choice
    is a near-deterministic copy from the question: the copy-from-context mechanism forms there (within ~100
    steps) and then carries over to copying from observations, where the random choices make the signal noisy.
    """
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    plateau = int(first_turn_share * steps)

    # No warm-up: measured on the first-turn data, full-size first steps form the copy circuit within ~250 steps
    # (dev-entity copy loss 6.7 -> 1.6); with a 12-step linear warm-up it had not formed after 250 (5.8).
    def schedule(s: int) -> float:  # constant through the first-turn phase, then cosine to 10%
        if s < plateau:
            return 1.0
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (s - plateau) / max(1, steps - plateau)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    losses = []
    for step in tqdm(range(steps), desc="format priming", leave=False):
        first = step < first_turn_share * steps
        loss = lm_step(model, [t.cut(rng, first) for t in rng.sample(transcripts, batch_size)], pad_id, device)
        if chunks and corpus_weight > 0 and not first:
            # a separate, down-weighted term: its random-fact targets must not drown the copy signal
            loss = loss + corpus_weight * lm_step(model, rng.sample(chunks, max(1, batch_size // 8)), pad_id, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log({"prime/loss": losses[-1]}, step)
    model.eval()
    return losses
