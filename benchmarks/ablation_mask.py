"""The Agent-R1 mask ablation: loss + advantage masks on vs off, same budget, 3 seeds.

For each (seed, mask) it runs prepare -> index -> base_model -> train in its own artifacts dir and reports
final dev EM, steps to dev EM 0.9, counterfactual-world EM and the mean gradient norm.

    python benchmarks/ablation_mask.py --seeds 1 2 3 --steps 150 --out artifacts/ablation
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from components.config import parse_config
from components.tracking.tracker import NullTracker


class Curve(NullTracker):
    def __init__(self):
        self.rows: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step=None):
        if step is not None:
            self.rows.setdefault(step, {}).update(metrics)


def run_one(out: Path, seed: int, mask_on: bool, steps: int, prime_steps: int) -> dict[str, float]:
    import components.data.prepare as prepare
    import components.model.base_model as base_model
    import components.retrieval.index as index
    import components.rl.train as train

    base = out / f"seed{seed}"
    raw = {
        "project": {"seed": seed, "artifacts_dir": str(base)},
        "data": {"datasets": [], "synthetic": {"seed": 1000 + seed}},
        "agent": {"system_prompt": False},
        "model": {"tiny": {"prime_steps": prime_steps}},
        "train": {"steps": steps, "eval_every": 10, "eval_questions": 200, "checkpoint_every": 50,
                  "mask": {"loss": mask_on, "advantage": mask_on}},
    }  # fmt: skip
    cfg = parse_config(raw)
    if not (base / "models" / "base").is_dir():  # prepare/index/prime once per seed, shared by both arms
        prepare.run(cfg, NullTracker())
        index.run(cfg, NullTracker())
        base_model.run(cfg, NullTracker())
    arm = base / ("mask_on" if mask_on else "mask_off")
    arm.mkdir(parents=True, exist_ok=True)
    for name in ("prepared", "index", "models"):
        link = arm / name
        if not link.exists():
            link.symlink_to(base / name if name != "models" else base / "models", target_is_directory=True)
    cfg = parse_config({**raw, "project": {"seed": seed, "artifacts_dir": str(arm)}})
    curve = Curve()
    result = train.run(cfg, curve)
    em_curve = [(s, r["dev/synthetic/em"]) for s, r in sorted(curve.rows.items()) if "dev/synthetic/em" in r]
    grad = [r["train/grad_norm"] for r in curve.rows.values() if "train/grad_norm" in r]
    return {
        "dev_em": result.get("dev/synthetic/em", float("nan")),
        "cf_em": result.get("dev/synthetic_cf/em", float("nan")),
        "steps_to_0.9": next((s for s, em in em_curve if em >= 0.9), None),
        "grad_norm_mean": statistics.fmean(grad) if grad else float("nan"),
        "em_curve": em_curve,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--prime-steps", type=int, default=400)
    ap.add_argument("--out", default="artifacts/ablation")
    args = ap.parse_args()
    out = Path(args.out)
    results = {}
    for seed in args.seeds:
        for mask_on in (True, False):
            r = run_one(out, seed, mask_on, args.steps, args.prime_steps)
            results[f"seed{seed}/{'on' if mask_on else 'off'}"] = r
            print(seed, "mask on " if mask_on else "mask off", {k: v for k, v in r.items() if k != "em_curve"}, flush=True)
    (out / "ablation.json").write_text(json.dumps(results, indent=1))
    print("| seed | mask | dev EM | steps to 0.9 | counterfactual EM | mean grad norm |")
    print("|---|---|---|---|---|---|")
    for key, r in results.items():
        seed, arm = key.split("/")
        print(f"| {seed[4:]} | {arm} | {r['dev_em']:.2f} | {r['steps_to_0.9'] or '-'} | {r['cf_em']:.2f} | {r['grad_norm_mean']:.3f} |")


if __name__ == "__main__":
    main()
