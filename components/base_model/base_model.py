"""The base_model stage: artifacts/models/base/ as one kind of directory (safetensors + tokenizer with a pad token).

A real model is converted from its source (components/base_model/source.py); the CPU profile ("tiny") builds the tiny
Qwen2 model and tokenizer from the prepared synthetic data and primes its format.
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
from pathlib import Path
import time

import torch

from components import artifacts
from components.agent.parser import answer_text, call_text
from components.agent.prompts import SYSTEM_PROMPT
from components.config import Config
from components.data.prepare import read_passages, read_questions
from components.data.schema import Question
from components.data.synthetic import COUNTERFACTUAL, FACTUAL, RELATIONS, question_text, words
from components.io import atomic_path
from components.base_model import cold_start, rejection, warmup
from components.model.loading import RolloutWeights, autocast, load_model, pick_device
from components.base_model.priming import corpus_chunks, make_transcripts, prime
from components.base_model.source import SOURCE_FILE, materialise
from components.model.tiny import build_model, build_tokenizer
from components.retrieval.embedded import EmbeddedBackend
from components.retrieval.factory import make_backend
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import EpisodeSetup, episode_setup

log = logging.getLogger(__name__)


def run(cfg: Config, tracker) -> dict[str, float]:
    """artifacts/models/pretrained (the source as is) and artifacts/models/base (after the format warm-up, if any)."""
    out, pretrained = artifacts.base_model(cfg), artifacts.pretrained_model(cfg)
    if cfg.model.name_or_path == "tiny":
        with atomic_path(out) as tmp:
            metrics = build_tiny(cfg, tmp, tracker)
        tracker.set_tags({"base_model": "tiny"})
        with atomic_path(pretrained) as tmp:
            shutil.copytree(out, tmp)
        return metrics
    info = materialise(cfg.model, pretrained)
    tracker.set_tags({"base_model": cfg.model.name_or_path, **{f"base_model.{k}": str(v) for k, v in info.items()}})
    metrics = {"params": float(info["params"])}
    with atomic_path(out) as tmp:
        if cfg.model.warmup.steps or cfg.model.warmup.cold_start_steps or cfg.model.warmup.rejection_samples:
            metrics |= warm_up_real(cfg, pretrained, tmp, tracker)
        else:
            shutil.copytree(pretrained, tmp)
    return metrics


def warm_up_real(cfg: Config, src: Path, out: Path, tracker) -> dict[str, float]:
    """The cold start (model.warmup.cold_start_steps), then the format warm-up (model.warmup.steps), on
    train-split questions of train.datasets, probed on other train-split questions (held out from both);
    the warmed-up model is saved at `out`."""
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    prepared = read_questions(artifacts.require(cfg, artifacts.questions(cfg)))
    train = [q for q in prepared if q.dataset in cfg.train.datasets and q.split == "train"]
    wc = cfg.model.warmup
    if len(train) < 2:
        raise ValueError(f"model.warmup: fewer than 2 train-split questions of train.datasets={cfg.train.datasets}")
    rng = random.Random(f"agentr1-warmup:{cfg.project.seed}")
    order = rng.sample(train, len(train))
    n_probe = min(wc.probe_questions, len(train) // 2)
    probe_qs, questions = order[:n_probe], order[n_probe : n_probe + wc.questions]
    passages = {p.id: p for p in read_passages(artifacts.require(cfg, artifacts.passages(cfg)))}
    titles = {i: p.title for i, p in passages.items()}
    model, tok = load_model(src, cfg, pick_device(cfg))
    backend = make_backend(cfg)
    episodes = episode_setup(tok, backend, train, cfg.agent, cfg.retrieval.top_k)  # as the trainer's rollouts
    chat = episodes.chat
    metrics: dict[str, float] = {}
    # the warm-up's probes roll out on vLLM (sent the weights before each) or on the model itself
    sampled = wc.steps or wc.rejection_samples
    actor = RolloutWeights(model, cfg, src) if cfg.rollout.engine == "vllm" and sampled else None
    try:
        if wc.cold_start_steps:
            metrics |= cold_start.run(model, chat, backend, order[n_probe:], prepared, passages, cfg, tracker)
        if wc.steps:
            metrics |= _format_warm_up(model, actor, episodes, backend, questions, probe_qs, titles, cfg, rng, tracker)
        if wc.rejection_samples:
            metrics |= _rejection_round(model, actor, episodes, backend, questions, probe_qs, cfg, tracker)
    finally:
        backend.close()
        if actor is not None:
            actor.close()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(src / SOURCE_FILE, out / SOURCE_FILE)
    return metrics


def _rejection_round(model, actor: RolloutWeights | None, episodes: EpisodeSetup, backend, questions: list[Question],
                     probe_qs: list[Question], cfg: Config, tracker) -> dict[str, float]:  # fmt: skip
    """The rejection round on `questions`, sampled on `actor` when there is one, then a probe on `probe_qs`."""

    def sampler():  # what samples the model's current weights: vLLM is sent them first
        if actor is None:
            return model
        actor.sync()
        return actor.model

    backend.reseed(0, 3)  # the round's own retriever ties (the cold start's are 1, the probes' 2)
    metrics = rejection.run(model, sampler(), episodes, questions, cfg, tracker)
    backend.reseed(0, 2)  # the format warm-up's probes' retriever ties
    scores = warmup.probe(sampler(), episodes, probe_qs, cfg, cfg.project.seed)
    return metrics | {f"rejection_probe/{k}": v for k, v in scores.items()}


def _format_warm_up(model, actor: RolloutWeights | None, episodes: EpisodeSetup, backend, questions: list[Question],
                    probe_qs: list[Question], titles: dict[str, str], cfg: Config, rng: random.Random,
                    tracker) -> dict[str, float]:  # fmt: skip
    """The format warm-up (components/base_model/warmup.py) on `questions`, probed on `probe_qs` (on `actor`'s vLLM
    process when there is one)."""
    chat = episodes.chat
    data = [t.seq for t in warmup.transcripts(questions, backend, chat, cfg, titles, rng)]
    held_out = warmup.transcripts(probe_qs, backend, chat, cfg, titles, rng)
    if not data:
        raise ValueError("model.warmup.steps: no warm-up transcript fits agent.max_total_tokens")
    seed = cfg.project.seed

    def measure(step: int) -> dict[str, float]:
        backend.reseed(0, 2)  # every probe sees the same retriever ties
        shown: list[str] = []
        if actor is not None:
            actor.sync()
        scores = warmup.probe(actor.model if actor else model, episodes, probe_qs, cfg, seed, shown)
        tracker.log_text("\n\n".join(shown), f"warmup/probe_step_{step:04d}.txt")
        with autocast(cfg, next(model.parameters()).device):
            forced = warmup.content_entropy_forced(model, held_out, chat.pad_id, cfg.train.temperature)
        return scores | {"content_entropy_forced": forced}

    result = warmup.warm_up(model, data, cfg, chat.pad_id, measure, log=tracker.log_metrics)
    return result.metrics(len(data))


def priming_questions(entities: list[str], relations: list[str], hops: int, n: int, exclude: set[str],
                      rng: random.Random) -> list[Question]:  # fmt: skip
    """Question-shaped prompts about random start entities (every entity equally often, so no entity gets a
    prior for or against being queried) and random relation chains; held-out question texts are skipped.
    Only their wording is used: no answer, no chain is ever read."""
    out: list[Question] = []
    while len(out) < n:
        text = question_text(rng.choice(entities), tuple(rng.choice(relations) for _ in range(hops)))
        if text not in exclude:
            out.append(Question(f"prime-{len(out)}", text, [], FACTUAL, "train", [], FACTUAL))
    return out


def build_tiny(cfg: Config, out, tracker) -> dict[str, float]:
    tc = cfg.model.tiny
    pc = tc.priming
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    t0 = time.perf_counter()
    questions_path = artifacts.require(cfg, artifacts.questions(cfg))
    passages_path = artifacts.require(cfg, artifacts.passages(cfg))
    passages = [p for p in read_passages(passages_path) if p.corpus in (FACTUAL, COUNTERFACTUAL)]
    questions = [q for q in read_questions(questions_path) if q.dataset in (FACTUAL, COUNTERFACTUAL)]
    train_qs = [q for q in questions if q.dataset == FACTUAL and q.split == "train"]
    factual = [p for p in passages if p.corpus == FACTUAL]
    if not train_qs or not factual:
        raise ValueError(f"{artifacts.prepared(cfg)}: the tiny model needs the synthetic world (data.synthetic.enabled: true)")
    entities = sorted({p.title for p in factual})
    rng = random.Random(f"agentr1-prime:{cfg.project.seed}")
    held_out = {q.question for q in questions if q.split != "train"}
    relations = sorted({r for q in train_qs for r in words(q.question) if r in RELATIONS})
    hops = cfg.data.synthetic.hops
    # Half the priming questions are 1-hop: a deterministic relation copy forms the copy circuit (docs/design-choices.md).
    n_one = len(train_qs) // 2 if hops > 1 else 0
    prime_qs = priming_questions(entities, relations, hops, len(train_qs) - n_one, held_out, rng)
    prime_qs += priming_questions(entities, relations, 1, n_one, held_out, rng)
    seen = held_out | {q.question for q in prime_qs}
    n_probe = pc.probes
    probe_qs = priming_questions(entities, relations, hops, n_probe - n_probe // 2, seen, rng)
    probe_qs += priming_questions(entities, relations, 1, n_probe // 2 if hops > 1 else 0, seen, rng)

    texts = [p.text for p in passages] + [q.question for q in questions] + [SYSTEM_PROMPT] * 100
    texts += [call_text(f"{e} {r}") + answer_text(e) for e in entities for r in RELATIONS]
    tokenizer = build_tokenizer(texts, tc.vocab_size)
    chat = ChatFormat.for_agent(tokenizer, cfg.agent)
    model = build_model(tokenizer, tc, seed=cfg.project.seed)

    with tempfile.TemporaryDirectory(prefix="agentr1-prime-") as d:
        backend = EmbeddedBackend(d, cfg.retrieval.embedded, seed=cfg.project.seed)
        backend.build(FACTUAL, factual)
        own_k = cfg.agent.own_top_k(cfg.retrieval.top_k)  # the agent's own searches
        transcripts, probes = (
            make_transcripts(qs, set(entities), set(RELATIONS), backend, FACTUAL, own_k, chat,
                             pc.max_turns or cfg.agent.max_turns, rng)  # fmt: skip
            for qs in (prime_qs, probe_qs)
        )
    chunks = corpus_chunks(factual, chat, 128, rng) if pc.corpus_weight > 0 else []
    primed = prime(model, transcripts, probes, chunks, pc, chat.pad_id, rng, log=tracker.log_metrics)
    for key, ok, goal in (("first_call_p", primed.scores["first_call_p"] >= pc.first_call_p, f">= {pc.first_call_p}"),
                          ("choice_kl", primed.scores["choice_kl"] <= pc.choice_kl, f"<= {pc.choice_kl}")):  # fmt: skip
        if not ok:  # expected for phase 2 on the CPU profile: its probe's goal is a stretch, the cap is the budget
            log.info("format priming ran to its step cap: %s=%.3f (goal %s); RL starts from this prior",
                     key, primed.scores[key], goal)  # fmt: skip
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "params": float(sum(p.numel() for p in model.parameters())),
        "vocab_size": float(len(tokenizer)),
        "transcripts": float(len(transcripts)),
        "prime_loss": float(sum(primed.losses[-20:]) / max(1, len(primed.losses[-20:]))) if primed.losses else 0.0,
        "prime_first_turn_steps": float(primed.first_turn_steps),
        "prime_steps": float(primed.full_steps),
        **{f"prime_{k}": v for k, v in primed.scores.items()},
        "prime_seconds": time.perf_counter() - t0,
    }
