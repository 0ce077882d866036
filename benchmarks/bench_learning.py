"""How long the learning test's run takes: the same config and pinned prior as tests/test_learning.py, alone.
With --prime, the prior is primed now by today's code instead: whether today's priming makes a prior that learns.
--seed sets the sampling seed, --world-seed another synthetic world (which needs --prime: the pinned prior's
vocabulary is its own world's words).

The test asserts that RL learns within its step cap; the wall time depends on the machine and on what else runs,
so it is measured here, with nothing else running:

    python benchmarks/bench_learning.py [--prime [--prime-steps N]] [--seed N] [--world-seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.env import apply_defaults  # noqa: E402

apply_defaults(ROOT)  # before torch computes anything (MKL_CBWR), as the test's conftest does

from components.evaluation.machine import cpu_line  # noqa: E402
from tests.test_learning import SEED, WORLD_SEED, learn, learning_config, other_world  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prime", action="store_true", help="prime a prior now instead of the pinned one")
    parser.add_argument("--seed", type=int, default=SEED, help="project.seed: model init and sampling")
    parser.add_argument("--world-seed", type=int, default=WORLD_SEED, help="data.synthetic.seed: the world")
    parser.add_argument("--prime-steps", type=int, help="with --prime: model.tiny.priming.steps (phase 2's cap)")
    args = parser.parse_args()
    if args.prime_steps is not None and not args.prime:
        parser.error("--prime-steps needs --prime")
    if not args.prime and (reason := other_world(learning_config(ROOT / "unused", world_seed=args.world_seed))):
        parser.error(f"--world-seed {args.world_seed}: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        run = learn(Path(tmp), prime=args.prime, seed=args.seed, world_seed=args.world_seed,
                    prime_steps=args.prime_steps)  # fmt: skip
    run.update(seed=args.seed, world_seed=args.world_seed, prime_steps=args.prime_steps)
    run["machine"] = cpu_line()
    run["total_s"] = round(run["setup_s"] + run["train_s"], 1)
    print(json.dumps(run))


if __name__ == "__main__":
    main()
