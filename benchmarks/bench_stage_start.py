"""What a stage process pays to start and exit, before and after the console script's collector settings.

Each `dvc repro` stage is one `agentr1 <stage>` process, and most of a small stage's time is importing its stack
(torch, transformers, verl, MLflow, GX) and tearing it down at exit. For each stage module this starts a process
that imports it and exits, in two ways, alternating, and reports the median wall time of each:

- plain: the interpreter's defaults;
- console: as `agentr1` runs now (components/cli.py main, components/stages.py run_stage): the collector is off
  while the stack imports, what it built is frozen, and the collector is on again; at exit it is frozen again.

    python benchmarks/bench_stage_start.py --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

from components.stages import STAGES
from components.evaluation.machine import cpu_line  # noqa: E402

PLAIN = "import importlib, sys; importlib.import_module(sys.argv[1])"
CONSOLE = ("import gc, importlib, sys; gc.disable(); importlib.import_module(sys.argv[1]); gc.freeze(); gc.enable(); "
           "gc.freeze()")  # fmt: skip


def wall(code: str, module: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, module], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{cpu_line()}, Python {platform.python_version()}")
    print(f"{'stage':<15} {'module':<34} {'plain s':>8} {'console s':>9}")
    totals = [0.0, 0.0]
    for name, stage in STAGES.items():
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(args.repeats):
            times[0].append(wall(PLAIN, stage.module))
            times[1].append(wall(CONSOLE, stage.module))
        plain, console = statistics.median(times[0]), statistics.median(times[1])
        totals[0] += plain
        totals[1] += console
        print(f"{name:<15} {stage.module:<34} {plain:8.2f} {console:9.2f}")
    print(f"{'all 8 stages':<50} {totals[0]:8.2f} {totals[1]:9.2f}")


if __name__ == "__main__":
    main()
