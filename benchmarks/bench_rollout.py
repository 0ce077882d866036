"""Rollout and RL-step speed of the local trainer, on the primed base model (artifacts/models/base).

Measures in one run:
  - batched KV-cache rollout tokens/s vs a naive loop (one `generate` call per sample and turn, same model,
    same environment, greedy so both produce the same tokens);
  - the share of rollout time spent in tools;
  - seconds per RL step split into rollout / update / logging.

    python benchmarks/bench_rollout.py --params params.yaml --questions 32 --steps 3
(needs prepare, index and base_model to have run)
"""

from __future__ import annotations

import argparse
import time

import torch

from components.config import load_config
from components.rl.train import build_trainer
from components.rollout.engine import RolloutStats, rollout
from components.tracking.tracker import NullTracker


def naive_rollout(model, chat, env, questions, agent) -> tuple[int, float, float]:
    """One HF `generate` per sample and turn; the whole context is re-encoded every turn."""
    t0, tool_s, generated = time.perf_counter(), 0.0, 0
    for q in questions:
        ep = env.reset(q)
        ids = chat.prompt_ids(q.question)
        while not ep.done:
            out = model.generate(torch.tensor([ids]), max_new_tokens=agent.max_tokens_per_turn, do_sample=False,
                                 eos_token_id=chat.eos_id, pad_token_id=chat.pad_id)  # fmt: skip
            new = out[0, len(ids) :].tolist()
            generated += len(new)
            ids = ids + new
            tt = time.perf_counter()
            res = env.step([ep], [chat.decode_turn(new)])[0]
            tool_s += time.perf_counter() - tt
            if not res.done:
                ids = ids + list(chat.insert_ids(res.observation, bool(new) and new[-1] == chat.eos_id))
    return generated, time.perf_counter() - t0, tool_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--questions", type=int, default=32, help="questions for the rollout comparison")
    ap.add_argument("--steps", type=int, default=3, help="RL steps timed")
    args = ap.parse_args()
    cfg = load_config(args.params)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    trainer = build_trainer(cfg)
    qs = trainer.train_qs[: args.questions]
    model, chat, agent = trainer.policy, trainer.chat, cfg.agent

    stats = RolloutStats()
    trajs = rollout(model, chat, trainer.env, qs, agent, temperature=0.0, stats=stats)
    n_naive, s_naive, tool_naive = naive_rollout(model, chat, trainer.env, qs, agent)
    same = sum(t.n_action_tokens for t in trajs) == n_naive
    print(f"rollout, {len(qs)} questions, greedy (same tokens: {same})")
    print(f"  batched KV-cache engine: {stats.generated_tokens} tokens in {stats.seconds:.2f}s = "
          f"{stats.tokens_per_s:,.0f} tok/s; tools {stats.tool_seconds / stats.seconds:.1%} of rollout time")
    print(f"  naive per-sample generate: {n_naive} tokens in {s_naive:.2f}s = {n_naive / s_naive:,.0f} tok/s; "
          f"tools {tool_naive / s_naive:.1%}")
    print(f"  speed-up: {stats.tokens_per_s / (n_naive / s_naive):.1f}x")

    tracker = NullTracker()
    rows = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        metrics, step_trajs = trainer.step(step)
        t1 = time.perf_counter()
        tracker.log_metrics(metrics, step=step)
        tracker.log_text("\n".join(str(t.episode.log) for t in step_trajs[:4]), "x.txt")
        t2 = time.perf_counter()
        rows.append((metrics["rollout_s"], metrics["update_s"], t2 - t1, t2 - t0, metrics["tool_s"]))
    r = [sum(c) / len(rows) for c in zip(*rows)]
    g = cfg.train
    print(f"RL step ({g.algorithm}, {g.questions_per_step} questions x group {g.group_size}), mean of {len(rows)}:")
    print(f"  {r[3]:.2f} s/step = rollout {r[0]:.2f} (tools {r[4]:.3f}) + update {r[1]:.2f} + logging {r[2]:.3f}")


if __name__ == "__main__":
    main()
