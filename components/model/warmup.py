"""Format warm-up of a real model: a short SFT on the agent's syntax that never shows a gold label.

Each transcript is a training question, one search whose query is the question itself, the real results, and an
answer copied from them: the title of a retrieved passage that is neither supporting nor a gold answer. Only the
model's turns are targets, tokenized exactly as the rollout engine does. RL then has to find the right passage.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import torch
from tqdm import tqdm

from components.agent.observation import format_hits
from components.agent.parser import answer_text, call_text
from components.agent.rewards import normalize_answer
from components.config import Config
from components.data.schema import Question
from components.model.loading import autocast, freeze_below
from components.model.priming import Sequence_, lm_step
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat


def transcripts(questions: Sequence[Question], backend: SearchBackend, chat: ChatFormat, cfg: Config,
                rng: random.Random) -> list[Sequence_]:  # fmt: skip
    """One call-then-answer transcript per question that has a non-gold title among its hits."""
    out = []
    cut = chat.cutter(cfg.agent.passage_max_tokens)
    by_corpus: dict[str, list[Question]] = {}
    for q in questions:
        by_corpus.setdefault(q.corpus, []).append(q)
    for corpus, qs in sorted(by_corpus.items()):
        for q, hits in zip(qs, backend.search(corpus, [q.question for q in qs], cfg.retrieval.top_k)):
            gold = {normalize_answer(a) for a in q.answers}
            decoys = [h.title for h in hits if h.id not in q.supporting_ids and normalize_answer(h.title) not in gold]
            if not decoys:
                continue
            prompt = chat.prompt_ids(q.question)
            call = chat.encode(call_text(q.question)) + [chat.eos_id]
            obs = list(chat.insert_ids(format_hits(hits, cut), True))
            answer = chat.encode(answer_text(rng.choice(decoys))) + [chat.eos_id]
            ids = prompt + call + obs + answer
            targets = [0] * len(prompt) + [1] * len(call) + [0] * len(obs) + [1] * len(answer)
            if len(ids) <= cfg.agent.max_total_tokens:
                out.append(Sequence_(ids, targets))
    return out


def warm_up(model, data: list[Sequence_], cfg: Config, pad_id: int, log=None) -> dict[str, float]:
    """`model.warmup_steps` AdamW steps of next-token loss on the transcripts' model turns."""
    mc = cfg.model
    device = next(model.parameters()).device
    params = freeze_below(model, cfg.train.trainable_layers)
    opt = torch.optim.AdamW(params, lr=mc.warmup_lr)
    rng = random.Random(f"agentr1-warmup:{cfg.project.seed}")
    model.train()
    losses, t0 = [], time.perf_counter()
    for step in tqdm(range(mc.warmup_steps), desc="format warm-up", disable=None):
        batch = rng.sample(data, min(mc.warmup_batch_size, len(data)))
        with autocast(cfg, device):
            loss = lm_step(model, batch, pad_id, device, micro_size=mc.warmup_micro_batch_size)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None:
            log({"warmup_loss": losses[-1]}, step=step + 1)
    model.requires_grad_(True)
    model.eval()
    tail = losses[-10:]
    return {"warmup_steps": float(len(losses)), "warmup_transcripts": float(len(data)),
            "warmup_first_loss": losses[0] if losses else 0.0, "warmup_loss": sum(tail) / max(1, len(tail)),
            "warmup_seconds": time.perf_counter() - t0}  # fmt: skip
