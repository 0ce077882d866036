"""How much signal GRPO gets: sample groups of episodes from a model once, then score them under each reward
setting and report the fraction of groups whose returns are not all equal (a group of equal returns has zero
advantage), plus the rates the episodes show.

    python benchmarks/reward_signal.py --model artifacts/models/base --questions 8 --group 16 --temperature 1.0 \
        -S profile=real -S data.synthetic.enabled=true -S 'data.datasets=[]' -S 'train.datasets=[synthetic]'

Needs prepared data, an index and the model dir. The episodes are sampled once per (temperature, forced first
search); every reward setting rescoring them sees the same episodes (components.agent.env.Episode.rescore), and
a smaller group is the first episodes of each group. Prints markdown rows with the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random

import numpy as np
import torch
import yaml

from components import artifacts
from components.agent.rewards import sub_exact_match
from components.config import RewardConfig, load_config
from components.data.prepare import read_passages, read_questions
from components.model import warmup
from components.model.loading import autocast, load_model, pick_device
from components.retrieval.factory import make_backend
from components.rl.advantages import groups_with_signal
from components.rollout.chat import ChatFormat
from components.rollout.content import content_entropy
from components.rollout.engine import RolloutStats, rollout
from components.rollout.evaluate import episode_prompts, make_env
from components.tracking.runs import commit as git_commit
from machine import cpu_line  # noqa: E402  (benchmarks/machine.py)

# name -> RewardConfig fields (the rest default to 0 / em)
SETTINGS = {
    "em": {"answer_metric": "em"},
    "f1+penalty (real profile before)": {"answer_metric": "f1", "format_penalty": 0.1},
    "subem": {"answer_metric": "subem"},
    "f1+format (Agent-R1 terms)": {"answer_metric": "f1", "valid_call": 0.5, "answer_format": 0.5},
    "subem+format (Agent-R1 terms)": {"answer_metric": "subem", "valid_call": 0.5, "answer_format": 0.5},
    "f1+supporting": {"answer_metric": "f1", "supporting": 0.5},
    "subem+format+supporting": {"answer_metric": "subem", "valid_call": 0.5, "answer_format": 0.5, "supporting": 0.5},
}


def sample(cfg, model, tok, questions, group: int, temperature: float, seed: int):
    """`group` trajectories of each question at `temperature`, the chat format and the rollout's stats."""
    chat = ChatFormat.for_agent(tok, cfg.agent)
    backend = make_backend(cfg)
    try:
        backend.reseed(seed, 0)
        env = make_env(backend, questions, cfg.agent, cfg.retrieval.top_k, chat)
        qs = [q for q in questions for _ in range(group)]
        stats = RolloutStats()
        gen = torch.Generator().manual_seed(seed)
        with autocast(cfg, next(model.parameters()).device):
            trajs = rollout(model, chat, env, qs, cfg.agent, temperature=temperature, generator=gen, stats=stats,
                            prompts=episode_prompts(qs, chat, env))  # fmt: skip
    finally:
        backend.close()
    return trajs, chat, stats


def forced_entropy(cfg, model, tok, questions) -> float:
    """The teacher-forced entropy at content tokens of warm-up transcripts of `questions` (the warm-up's floor)."""
    chat = ChatFormat.for_agent(tok, cfg.agent)
    wanted = {i for q in questions for i in q.supporting_ids}
    titles = {p.id: p.title for p in read_passages(artifacts.passages(cfg)) if p.id in wanted}
    backend = make_backend(cfg)
    try:
        made = warmup.transcripts(questions, backend, chat, cfg, titles, random.Random(0))
    finally:
        backend.close()
    with autocast(cfg, next(model.parameters()).device):
        return warmup.content_entropy_forced(model, made, chat.pad_id, cfg.train.temperature)


def rows_for(trajs, chat, stats, group: int, sizes: list[int]) -> list[dict]:
    episodes = [t.episode for t in trajs]
    n_calls = sum(e.n_calls for e in episodes)
    base = {
        "answered": np.mean([e.answer is not None for e in episodes]),
        "valid_calls": sum(e.n_valid_calls for e in episodes) / n_calls if n_calls else 1.0,
        "searches": np.mean([e.n_valid_calls for e in episodes]),
        "em": np.mean([e.em for e in episodes]),
        "f1": np.mean([e.f1 for e in episodes]),
        "subem": np.mean([sub_exact_match(e.answer, e.question.answers) for e in episodes]),
        "entropy": stats.entropy,
        "content_entropy": content_entropy(trajs, chat),
        "tokens_per_s": stats.tokens_per_s,
    }
    out = []
    for size in sizes:
        keep = [e for i, e in enumerate(episodes) if i % group < size]
        index = np.array([e.question.id for e in keep], dtype=object)
        for name, fields in SETTINGS.items():
            w = RewardConfig(**fields)
            scores = torch.tensor([e.rescore(w) for e in keep])
            out.append({**base, "group": size, "reward": name, "groups_with_signal": groups_with_signal(scores, index),
                        "mean_reward": float(scores.mean())})  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("-S", "--set", action="append", default=[], help="a param override, key=value (YAML value)")
    ap.add_argument("--model", default=None, help="model dir (default: artifacts/models/base)")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16], help="group sizes reported (first episodes)")
    ap.add_argument("--temperature", type=float, nargs="+", default=[1.0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.set)}
    cfg = load_config(args.params, overrides)
    train = [q for q in read_questions(artifacts.questions(cfg)) if q.dataset in cfg.train.datasets and q.split == "train"]
    questions = random.Random(f"signal:{args.seed}").sample(train, args.questions)
    model, tok = load_model(args.model or artifacts.base_model(cfg), cfg, pick_device(cfg))
    forced = forced_entropy(cfg, model, tok, questions)
    commit = git_commit()
    print(f"{cpu_line()}, {args.threads} thread(s); {datetime.date.today()}; commit {commit}; model {args.model}; "
          f"force_first_search={cfg.agent.force_first_search}; {args.questions} train questions of {cfg.train.datasets}")
    rows = []
    for temp in args.temperature:
        trajs, chat, stats = sample(cfg, model, tok, questions, args.group, temp, args.seed)
        for r in rows_for(trajs, chat, stats, args.group, [s for s in args.sizes if s <= args.group]):
            rows.append({"temperature": temp, **r, "content_entropy_forced": forced})
    cols = ["temperature", "group", "reward", "groups_with_signal", "mean_reward", "answered", "valid_calls",
            "searches", "em", "f1", "subem", "entropy", "content_entropy", "content_entropy_forced", "tokens_per_s"]  # fmt: skip
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=float)


if __name__ == "__main__":
    main()
