"""Probe: one RL update on the same batch, eager against `torch.compile(dynamic=True)` of the trained layers.

    python benchmarks/bench_update_compile.py --profile qwen --questions 8 --group 8

Rolls out one batch on the profile's trainer (every row updated: a 1e-9 entropy bonus), then times the update from the
same weights and optimizer state: `--eager` times eager, then the trained decoder layers are compiled in place and
the update is timed `--compiled` times (the first includes the compilation). Needs the profile's prepare, index and
base_model outputs.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from components import artifacts
from components.config import load_config
from components.data.prepare import read_questions
from components.evaluation.machine import cpu_line
from components.model.loading import load_model, pick_device
from components.retrieval.factory import make_backend
from components.rollout.engine import RolloutStats
from components.train.local.advantages import step_config
from components.train.local.batch import collate
from components.train.local.train import Trainer
from components.train.local.update import update as rl_update


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="qwen")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--eager", type=int, default=2)
    ap.add_argument("--compiled", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg = load_config("params.yaml", {"profile": args.profile, "train.entropy_coef": 1e-9,
                                      "train.questions_per_step": args.questions, "train.group_size": args.group})  # fmt: skip
    qs = [q for q in read_questions(artifacts.questions(cfg)) if q.split == "train"]
    policy, tok = load_model(artifacts.base_model(cfg), cfg, pick_device(cfg))
    tr = Trainer(cfg, policy, tok, make_backend(cfg), qs, {})
    stats = RolloutStats()
    tr.actor.sync()
    group = [q for q in tr.sample_questions(0) for _ in range(args.group)]
    with tr.rollout_amp():
        trajs = tr.episodes.rollout(tr.actor.model, group, temperature=1.0, generator=torch.Generator().manual_seed(0),
                                    stats=stats, engine=tr.cfg.rollout, capture_layer=tr.keep_layer)  # fmt: skip
    batch = collate(trajs, tr.chat.pad_id, tr.keep_layer).to(tr.device)
    tc = step_config(tr.cfg.train, stats.entropy)
    weights, opt_state = copy.deepcopy(policy.state_dict()), copy.deepcopy(tr.opt.state_dict())
    rows = []

    def timed(mode: str) -> None:
        policy.load_state_dict(weights)
        tr.opt.load_state_dict(opt_state)
        t0 = time.perf_counter()
        out = rl_update(tr.learner, batch, tc, tr.amp)
        rows.append({"mode": mode, "update_s": round(time.perf_counter() - t0, 2), "pg_loss": out["pg_loss"],
                     "grad_norm": out.get("grad_norm")})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)

    for _ in range(args.eager):
        timed("eager")
    layers = policy.base_model.layers
    for layer in layers[len(layers) - cfg.train.trainable_layers :]:
        layer.compile(dynamic=True)
    for _ in range(args.compiled):
        timed("compiled")
    print(f"{cpu_line()}; profile {args.profile}; batch {tuple(batch.response_mask.shape)}, "
          f"{int(batch.attention_mask.sum())} tokens, {int(batch.action_mask.sum())} action tokens")  # fmt: skip


if __name__ == "__main__":
    main()
