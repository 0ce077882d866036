"""Prepare throughput in rows/s (questions + passages) on the shipped data: per loader, the synthetic
generator, and the whole stage (load + Parquet write), best of --repeats runs.

    .venv/bin/python benchmarks/bench_prepare.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.config import load_config  # noqa: E402
from components.data.loaders import LOADERS  # noqa: E402
from components.data.passages import PassageTable  # noqa: E402
from components.data.prepare import run  # noqa: E402
from components.data.synthetic import SPLITS, generate_world  # noqa: E402
from components.tracking.tracker import NullTracker  # noqa: E402


def best(fn, repeats: int) -> tuple[float, int, int]:
    """(seconds, questions, passages) of the fastest of `repeats` calls; fn returns (questions, passages)."""
    times, counts = [], (0, 0)
    for _ in range(repeats):
        start = time.perf_counter()
        counts = fn()
        times.append(time.perf_counter() - start)
    return min(times), *counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cfg = load_config(ROOT / "params.yaml", {"project.data_dir": str(ROOT / "data")})
    rows = []
    for spec in cfg.data.datasets:
        def load(spec=spec):
            table = PassageTable()
            return len(LOADERS[spec.format](spec, cfg.data_root / spec.path, table)), len(table)

        rows.append((f"{spec.name} ({spec.format})", *best(load, args.repeats)))

    def synthetic():
        worlds = [generate_world(cfg.data.synthetic), generate_world(cfg.data.synthetic, counterfactual=True)]
        return sum(len(w.questions(s)) for w in worlds for s in SPLITS), sum(len(w.passages()) for w in worlds)

    rows.append(("synthetic + counterfactual worlds", *best(synthetic, args.repeats)))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"project.data_dir": str(ROOT / "data"), "project.artifacts_dir": tmp}
        stage_cfg = load_config(ROOT / "params.yaml", paths)

        def stage():
            m = run(stage_cfg, NullTracker())
            return int(m["questions_total"]), int(m["passages_total"])

        rows.append(("prepare stage (all, + parquet write)", *best(stage, args.repeats)))

    print(f"{'source':<42} {'questions':>9} {'passages':>9} {'seconds':>8} {'rows/s':>10}")
    for name, sec, nq, np_ in rows:
        print(f"{name:<42} {nq:>9} {np_:>9} {sec:>8.3f} {(nq + np_) / sec:>10,.0f}")


if __name__ == "__main__":
    main()
