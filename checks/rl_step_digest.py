"""A fingerprint of the local trainer: a few steps of each RL variant on a small synthetic world, fixed seeds.

    python checks/rl_step_digest.py --out /tmp/before.json          # on the code before a refactor
    python checks/rl_step_digest.py --check /tmp/before.json        # after: exit 1 on any difference

Records every logged metric but wall-clock ones (to the last bit: floats as repr), a SHA-256 of every sampled
trajectory (tokens, masks, rewards, behaviour log-probs, turn spans), of the trained weights, and of the last
checkpoint's tensors (modules, optimizer state, torch RNG; python's and numpy's are never seeded) and curve; and
the rollout engine alone in every evaluation mode. A refactor meant to change nothing must leave all of it equal.
It runs with PYTHONHASHSEED=0 (set orders). Digests depend on the torch build and CPU: compare on one machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import torch

import components.data.prepare as prepare
import components.base_model.base_model as base_model
import components.retrieval.index as index
from components import artifacts
from components.config import parse_config
from components.train.local import checkpoint as ckpt
from components.train.local import train
from components.tracking.tracker import NullTracker

VARIANTS = {
    "grpo": {},  # the zero-advantage row skip is on
    "grpo_kl_entropy_2epochs": {"kl_coef": 0.1, "entropy_coef": 0.01, "ppo_epochs": 2},
    "grpo_seq_mean_no_loss_mask": {"loss_agg_mode": "seq-mean-token-mean", "mask": {"loss": False}},
    "ppo_2epochs_gamma_lam": {"algorithm": "ppo", "ppo_epochs": 2, "gamma": 0.9, "lam": 0.8},
    "ppo_no_loss_mask": {"algorithm": "ppo", "lam": 0.95, "mask": {"loss": False}},
    "ppo_no_masks": {"algorithm": "ppo", "lam": 0.95, "mask": {"loss": False, "advantage": False}},
    "rloo": {"algorithm": "rloo"},
    "reinforce_plus_plus": {"algorithm": "reinforce_plus_plus", "gamma": 0.95},
}
TIMING = re.compile(r"(_s|_seconds|tokens_per_s)$")


def raw_config(art: Path, **train_over) -> dict:
    return {
        "project": {"seed": 3, "artifacts_dir": str(art)},
        "data": {"datasets": [], "synthetic": {"seed": 7, "n_entities": 40, "n_relations": 4, "n_train": 60,
                                               "n_dev": 10, "n_test": 10}},  # fmt: skip
        "agent": {"system_prompt": False, "max_turns": 3, "max_tokens_per_turn": 12,  # dense rewards: all learn
                  "reward": {"answer_metric": "f1", "format_penalty": 0.1, "valid_call": 0.2, "invalid_call": 0.05,
                             "new_info": 0.1, "supporting": 0.3, "search_cost": 0.02}},
        "model": {"tiny": {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 1,
                           "priming": {"first_turn_steps": 40, "steps": 40, "batch_size": 4, "probes": 8, "lr": 1e-2}}},
        "train": {"steps": 4, "questions_per_step": 3, "group_size": 3, "micro_batch_size": 4, "eval_every": 2,
                  "eval_questions": 4, "checkpoint_every": 2, "log_trajectories_every": 2, **train_over},
    }  # fmt: skip


class Recorder(NullTracker):
    def __init__(self):
        self.metrics: dict[str, dict[str, str]] = {}
        self.texts: dict[str, str] = {}

    def log_metrics(self, metrics, step=None):
        kept = {k: repr(float(v)) for k, v in metrics.items() if not TIMING.search(k)}
        self.metrics.setdefault(str(step), {}).update(kept)

    def log_text(self, text, artifact_file):
        self.texts[artifact_file] = hashlib.sha256(text.encode()).hexdigest()


def tensor_digest(obj, h=None):
    """SHA-256 over a nested structure of tensors, arrays and plain values, in key order."""
    h = h or hashlib.sha256()
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            tensor_digest(obj[k], h)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensor_digest(v, h)
    elif hasattr(obj, "tobytes"):
        h.update(obj.tobytes())
    else:
        h.update(repr(obj).encode())
    return h


def run_variant(prepared: Path, work: Path, over: dict) -> dict:
    import shutil

    art = work / "art"
    shutil.copytree(prepared, art)
    cfg = parse_config(raw_config(art, **over))
    rollouts = hashlib.sha256()
    original = train.Trainer.step

    def recording(self, step):
        metrics, trajs = original(self, step)
        for t in trajs:  # the step's sampled episodes
            rollouts.update(repr((t.input_ids, t.action_mask, t.rewards, t.logprobs, t.turn_spans)).encode())
        return metrics, trajs

    train.Trainer.step = recording
    try:
        rec = Recorder()
        result = train.run(cfg, rec)
    finally:
        train.Trainer.step = original
    from safetensors.torch import load_file

    last = ckpt.latest(train.checkpoint_root(cfg))
    blob = torch.load(last / ckpt.WEIGHTS, map_location="cpu", weights_only=False)
    state = json.loads((last / ckpt.STATE).read_text())
    state.pop("run_id", None)
    curve = [(n, {k: repr(v) for k, v in m.items() if not TIMING.search(k)}) for n, m in state.pop("curve")]
    return {
        "result": {k: repr(v) for k, v in result.items()},
        "metrics": rec.metrics,
        "texts": rec.texts,
        "rollouts": rollouts.hexdigest(),
        "trained_weights": tensor_digest(load_file(artifacts.trained_model(cfg) / "model.safetensors")).hexdigest(),
        "checkpoint": last.name,
        "checkpoint_tensors": tensor_digest([blob["modules"], blob["optimizers"], blob["rng"]["torch"]]).hexdigest(),
        "checkpoint_state": hashlib.sha256(json.dumps([state, curve], sort_keys=True).encode()).hexdigest(),
    }


def rollout_fingerprint(prepared: Path) -> dict:
    """The rollout engine outside training: greedy evaluation in every mode (several batches), and sampled
    episodes cut by max_total_tokens with a chunked prefill."""
    import components.evaluation.agent_eval as ev
    from components.data.prepare import read_questions
    from components.model.loading import load_model
    from components.retrieval.factory import make_backend
    from components.config import RolloutConfig
    from components.rollout.engine import RolloutStats
    from components.rollout.episode_setup import episode_setup

    cfg = parse_config(raw_config(prepared))
    qs = [q for q in read_questions(artifacts.questions(cfg)) if q.split == "dev"][:12]
    model, tok = load_model(artifacts.base_model(cfg), cfg, torch.device("cpu"))
    backend = make_backend(cfg)
    out = {}
    for mode in ("agent", "direct", "naive_rag"):
        for budget in (10**6, 400):
            res = ev.evaluate_agent(model, tok, qs, backend, cfg.agent, cfg.retrieval.top_k, mode=mode,
                                    batch_tokens=budget)  # fmt: skip
            kept = [[getattr(r, f.name) for f in dataclasses.fields(r) if f.compare] for r in res]  # not timings
            out[f"eval_{mode}_{budget}"] = hashlib.sha256(repr(kept).encode()).hexdigest()
    agent = cfg.agent.model_copy(update={"max_total_tokens": 70})
    episodes = episode_setup(tok, backend, qs, agent, cfg.retrieval.top_k)
    stats = RolloutStats()
    # fewer cache rows than episodes (queued ones take freed rows); long prefill chunks a few columns at a time
    engine = RolloutConfig(max_rows=8, prefill_tokens=64)
    trajs = episodes.rollout(model, qs * 2, generator=torch.Generator().manual_seed(5), stats=stats, engine=engine)
    out["sampled_cut_chunked"] = hashlib.sha256(repr([(t.input_ids, t.action_mask, t.rewards, t.logprobs,
                                                      t.turn_spans, t.episode) for t in trajs]).encode()).hexdigest()
    out["sampled_stats"] = repr((stats.generated_tokens, stats.forward_calls, stats.entropy_sum))
    return out


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # the tokenizer and BM25 vocabularies follow set order
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, help="write the fingerprint here")
    ap.add_argument("--check", type=Path, help="compare against a fingerprint; exit 1 on any difference")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.work or tmp
        prepared = Path(tmp) / "prepared"
        cfg = parse_config(raw_config(prepared))
        prepare.run(cfg, NullTracker())
        index.run(cfg, NullTracker())
        base_model.run(cfg, NullTracker())
        got = {"rollout": rollout_fingerprint(prepared)}
        print("rollout", got["rollout"], flush=True)
        for name in args.variants:
            got[name] = run_variant(prepared, Path(tmp) / name, VARIANTS[name])
            print(name, got[name]["trained_weights"][:16], got[name]["rollouts"][:16], flush=True)
    if args.out:
        args.out.write_text(json.dumps(got, indent=1, sort_keys=True))
    if args.check:
        ref = json.loads(args.check.read_text())
        bad = []
        for name, fp in got.items():
            for key, value in fp.items():
                if ref.get(name, {}).get(key) != value:
                    bad.append(f"{name}.{key}")
        print("IDENTICAL" if not bad else "DIFFERENT: " + ", ".join(bad))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
