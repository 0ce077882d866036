"""One RL step of the real model under each speed knob, side by side in one process (same questions, same seed).

    python benchmarks/bench_real_step.py --questions 4 --group 4 --variants fp32 bf16 bf16-top8 bf16-top8-ckpt

Needs prepared data, an index and the real base model (`agentr1 prepare/index/base-model -S profile=real`).
Every row is updated (a 1e-9 entropy term keeps the zero-advantage skip off), so update figures are full cost.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time

import torch

from components.config import load_config
from components import artifacts
from components.data.prepare import read_questions
from components.model.loading import load_model, pick_device
from components.retrieval.factory import make_backend
from components.train.local.train import Trainer
from components.evaluation.machine import cpu_line  # noqa: E402

VARIANTS = {
    "fp32": {"model.autocast": False, "train.trainable_layers": None, "train.gradient_checkpointing": False},
    "bf16": {"model.autocast": True, "train.trainable_layers": None, "train.gradient_checkpointing": False},
    "bf16-top8": {"model.autocast": True, "train.trainable_layers": 8, "train.gradient_checkpointing": False},
    "bf16-top4": {"model.autocast": True, "train.trainable_layers": 4, "train.gradient_checkpointing": False},
    "bf16-ckpt": {"model.autocast": True, "train.trainable_layers": None, "train.gradient_checkpointing": True},
    "fp32-top8": {"model.autocast": False, "train.trainable_layers": 8, "train.gradient_checkpointing": False},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--profile", default="real")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=["fp32", "bf16", "bf16-top8"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.variants:
        cfg = load_config(args.params, {"profile": args.profile, **VARIANTS[name], "train.entropy_coef": 1e-9,
                                        "train.questions_per_step": args.questions, "train.group_size": args.group})  # fmt: skip
        qs = [q for q in read_questions(artifacts.questions(cfg)) if q.dataset == args.dataset]
        qs = random.Random(0).sample(qs, args.questions)
        policy, tok = load_model(artifacts.base_model(cfg), cfg, pick_device(cfg))
        trainer = Trainer(cfg, policy, tok, make_backend(cfg), qs, {})
        t0 = time.perf_counter()
        metrics, trajs = trainer.step(0)
        tokens = sum(len(t.input_ids) for t in trajs)
        rows.append({
            "variant": name, "step_s": round(time.perf_counter() - t0, 2), "rollout_s": round(metrics["rollout_s"], 2),
            "rollout_tok_per_s": round(metrics["rollout_tokens_per_s"], 1), "update_s": round(metrics["update_s"], 2),
            "update_tok_per_s": round(tokens * metrics["updated_fraction"] / metrics["update_s"], 1),
            "trainable_params": sum(p.numel() for p in trainer.trainable), "episode_tokens": tokens,
            "answered": metrics["answered"], "searches": metrics["searches"],
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    print(f"machine: {cpu_line()}, {torch.get_num_threads()} threads; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
