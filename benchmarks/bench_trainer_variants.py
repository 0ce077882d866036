"""RL steps of the local trainer in several set-ups, alternated in one process: the engine of the trainer's rollouts
(`train.rollout_engine`: hf or vllm) and `train.compile`, each variant its own trainer from the same base weights.

    python benchmarks/bench_trainer_variants.py --profile real --questions 8 --group 8 --rounds 3 \
        --variants hf vllm hf+compile vllm+compile

Round r runs step r of every variant in turn, so a machine whose speed drifts slows them alike; every trainer draws
the same questions (one seed), and their episodes part as their policies do. Step 0 is reported apart: it pays vLLM's
first sync of every weight and the first compilation (or loads TORCHINDUCTOR_CACHE_DIR's kernels). Every row is
updated (a 1e-9 entropy bonus), as in bench_real_rollout.py. Needs the profile's prepare, index and base_model outputs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics

import torch

from components import artifacts
from components.config import load_config
from components.data.prepare import read_questions
from components.env import apply_defaults
from components.evaluation.machine import cpu_line
from components.model.loading import load_model, pick_device
from components.retrieval.factory import make_backend
from components.tracking.runs import commit as git_commit
from components.train.local.train import Trainer, split_questions


def trainer(profile: str, variant: str, questions: int, group: int) -> Trainer:
    engine, _, compiled = variant.partition("+")
    cfg = load_config("params.yaml", {"profile": profile, "train.rollout_engine": engine,
                                      "train.compile": compiled == "compile", "train.entropy_coef": 1e-9,
                                      "train.questions_per_step": questions, "train.group_size": group})  # fmt: skip
    train_qs = split_questions(read_questions(artifacts.questions(cfg)), cfg.train.datasets, "train")
    qs = random.Random(7).sample(train_qs, questions)  # the step's questions: all of them, every step
    policy, tok = load_model(artifacts.base_model(cfg), cfg, pick_device(cfg))
    return Trainer(cfg, policy, tok, make_backend(cfg), qs, {}, artifacts.base_model(cfg))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="real")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after step 0")
    ap.add_argument("--variants", nargs="+", default=["hf", "vllm", "hf+compile", "vllm+compile"],
                    choices=["hf", "vllm", "hf+compile", "vllm+compile"])  # fmt: skip
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    apply_defaults()
    torch.set_num_threads(args.threads)
    trainers = {v: trainer(args.profile, v, args.questions, args.group) for v in args.variants}
    steps: dict[str, list[dict]] = {v: [] for v in trainers}
    try:
        for step in range(args.rounds + 1):
            for variant, tr in trainers.items():
                metrics, trajs = tr.step(step)
                row = {"variant": variant, "step": step, "rollout_s": round(metrics["rollout_s"], 1),
                       "update_s": round(metrics["update_s"], 1), "tokens": sum(len(t.input_ids) for t in trajs)}  # fmt: skip
                row["step_s"] = round(row["rollout_s"] + row["update_s"], 1)
                steps[variant].append(row)
                print(json.dumps(row), flush=True)
    finally:
        for tr in trainers.values():
            tr.actor.close()
    print(f"\nMachine: {cpu_line()}, {args.threads} threads. Date: {datetime.date.today()}. Commit: {git_commit()}. "
          f"Profile {args.profile}, {args.questions} x {args.group} episodes a step; medians of {args.rounds} "
          f"alternated rounds (step 0 apart).\n")  # fmt: skip
    print("| variant | step 0 s | rollout s | update s | step s | steps s |\n|---|---|---|---|---|---|")
    for variant, rows in steps.items():
        timed = rows[1:]
        med = {k: statistics.median(r[k] for r in timed) for k in ("rollout_s", "update_s", "step_s")}
        print(f"| {variant} | {rows[0]['step_s']:.1f} | {med['rollout_s']:.1f} | {med['update_s']:.1f} | "
              f"{med['step_s']:.1f} | {', '.join(str(r['step_s']) for r in timed)} |")  # fmt: skip


if __name__ == "__main__":
    main()
