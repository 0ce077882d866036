"""The Agent-R1 mask ablation: loss + advantage masks on vs off, same budget, 3 seeds.

The CPU profile of params.yaml on the synthetic world only. For each seed it prepares, indexes and primes once,
then trains both arms from the same primed base with the same step cap, each stopping once dev EM reaches 0.9
(params.yaml's target), and reports final dev EM, steps to 0.9, counterfactual-world EM and the mean gradient
norm. Seeds can run as separate processes (`--seeds 2 --threads 1`) and share `--out`.

    python benchmarks/ablation_mask.py --seeds 1 2 3 --steps 150 --out artifacts/ablation
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from components.config import load_config
from components.tracking.tracker import NullTracker


class Curve(NullTracker):
    def __init__(self):
        self.rows: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step=None):
        if step is not None:
            self.rows.setdefault(step, {}).update(metrics)


def config(art: Path, seed: int, mask_on: bool, steps: int, threads: int):
    return load_config("params.yaml", {
        "project.seed": seed, "project.artifacts_dir": str(art), "data.datasets": [],
        "data.synthetic.seed": 1000 + seed, "model.tiny.num_threads": threads, "train.num_threads": threads,
        "train.steps": steps, "train.stop_at_target": True, "train.eval_every": 10, "train.checkpoint_every": 50,
        "train.mask.loss": mask_on, "train.mask.advantage": mask_on,
    })  # fmt: skip


def run_one(out: Path, seed: int, mask_on: bool, steps: int, threads: int) -> dict[str, float]:
    import components.data.prepare as prepare
    import components.model.base_model as base_model
    import components.retrieval.index as index
    import components.rl.train as train

    base = out / f"seed{seed}"
    cfg = config(base, seed, mask_on, steps, threads)
    if not (base / "models" / "base").is_dir():  # prepare/index/prime once per seed, shared by both arms
        prepare.run(cfg, NullTracker())
        index.run(cfg, NullTracker())
        primed = base_model.run(cfg, NullTracker())
        (base / "priming.json").write_text(json.dumps(primed, indent=1))
    arm = base / ("mask_on" if mask_on else "mask_off")
    arm.mkdir(parents=True, exist_ok=True)
    for name in ("prepared", "index", "models"):
        link = arm / name
        if not link.exists():
            link.symlink_to(base / name, target_is_directory=True)
    cfg = config(arm, seed, mask_on, steps, threads)
    curve = Curve()
    t0 = time.perf_counter()
    result = train.run(cfg, curve)
    em_curve = [(s, r["dev/synthetic/em"]) for s, r in sorted(curve.rows.items()) if "dev/synthetic/em" in r]
    grad = [r["train/grad_norm"] for r in curve.rows.values() if "train/grad_norm" in r]
    return {
        "dev_em": result.get("dev/synthetic/em", float("nan")),
        "best_dev_em": result.get("best_dev_em", float("nan")),
        "cf_em": result.get("dev/synthetic_cf/em", float("nan")),
        "steps_to_0.9": next((s for s, em in em_curve if em >= 0.9), None),
        "grad_norm_mean": statistics.fmean(grad) if grad else float("nan"),
        "train_s": time.perf_counter() - t0,
        "em_curve": em_curve,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="artifacts/ablation")
    args = ap.parse_args()
    out = Path(args.out).resolve()  # the arms link to the seed's shared dirs by absolute path
    results = {}
    for seed in args.seeds:
        for mask_on in (True, False):
            r = run_one(out, seed, mask_on, args.steps, args.threads)
            results[f"seed{seed}/{'on' if mask_on else 'off'}"] = r
            print(seed, "mask on " if mask_on else "mask off", {k: v for k, v in r.items() if k != "em_curve"}, flush=True)
    (out / f"ablation-{'-'.join(map(str, args.seeds))}.json").write_text(json.dumps(results, indent=1))
    print("| seed | mask | dev EM (best) | steps to 0.9 | counterfactual EM | mean grad norm |")
    print("|---|---|---|---|---|---|")
    for key, r in results.items():
        seed, arm = key.split("/")
        print(f"| {seed[4:]} | {arm} | {r['dev_em']:.2f} ({r['best_dev_em']:.2f}) | {r['steps_to_0.9'] or '-'} "
              f"| {r['cf_em']:.2f} | {r['grad_norm_mean']:.3f} |")


if __name__ == "__main__":
    main()
