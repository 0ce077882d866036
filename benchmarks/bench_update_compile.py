"""One RL update eager against `train.compile` (the trained layers under torch.compile), on the same batch, alternated.

    python benchmarks/bench_update_compile.py --profile qwen --questions 4 --group 4 --rounds 4

Rolls out one batch on the profile's trainer (every row updated: a 1e-9 entropy bonus), then times the update from
the same weights and optimizer state, eager and compiled in turn for `--rounds` rounds, so that a machine whose speed
drifts slows both alike. The first compiled call compiles (or loads TORCHINDUCTOR_CACHE_DIR's kernels) and is
reported apart. Needs the profile's prepare, index and base_model outputs.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import statistics
import time

import torch

from components import artifacts
from components.config import load_config
from components.data.prepare import read_questions
from components.env import apply_defaults
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
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    apply_defaults()
    torch.set_num_threads(args.threads)
    cfg = load_config("params.yaml", {"profile": args.profile, "train.compile": True, "train.entropy_coef": 1e-9,
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
    learners = {"eager": dataclasses.replace(tr.learner, layers=None), "compiled": tr.learner}
    times: dict[str, list[float]] = {"eager": [], "compiled": []}

    def timed(mode: str) -> float:
        policy.load_state_dict(weights)
        tr.opt.load_state_dict(opt_state)
        t0 = time.perf_counter()
        out = rl_update(learners[mode], batch, tc, tr.amp)
        seconds = time.perf_counter() - t0
        print(json.dumps({"mode": mode, "update_s": round(seconds, 2), "pg_loss": out["pg_loss"],
                          "grad_norm": out.get("grad_norm")}), flush=True)  # fmt: skip
        return seconds

    first = timed("compiled")
    for _ in range(args.rounds):
        for mode in times:
            times[mode].append(timed(mode))
    eager, compiled = statistics.median(times["eager"]), statistics.median(times["compiled"])
    print(f"Machine: {cpu_line()}, {torch.get_num_threads()} threads. Date: {datetime.date.today()}. Profile "
          f"{args.profile}; batch {args.questions} x {args.group}: {int(batch.attention_mask.sum())} tokens, "
          f"{int(batch.action_mask.sum())} action tokens. First compiled call {first:.1f} s. Median of "
          f"{args.rounds} alternated rounds: eager {eager:.1f} s, compiled {compiled:.1f} s ({compiled / eager - 1:+.0%}); "
          f"eager {[round(t, 1) for t in times['eager']]}, compiled {[round(t, 1) for t in times['compiled']]}")  # fmt: skip


if __name__ == "__main__":
    main()
