"""How long one `agentr1 ask` takes, as a new process each time, on this project's champion (run `make run` first).

Side by side, interleaved round by round so that both see the same machine:
- in-process: the CLI imports torch and transformers, loads the weights and runs the agent (its own split is
  printed from `--json`'s timings);
- served: `agentr1 ask --url` against the champion that `scripts/serve.sh` (`make serve`) keeps loaded;
- the floor under in-process, measured in the same run: Python alone, the CLI's own imports, `import torch`, and
  torch with the transformers model code the agent runs.

    .venv/bin/python benchmarks/bench_ask.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from components.evaluation.machine import cpu_line  # noqa: E402
from tests.served import free_port, start, stop, wait_up  # noqa: E402

QUESTION = "Who is the neighbor of the rival of Goretu?"
BIN = Path(sys.executable).parent
GC_OFF = "import gc; gc.disable(); "  # as `ask` imports (components/cli.py)
FLOORS = {
    "python, nothing imported": "pass",
    "the CLI's imports (typer, config)": GC_OFF + "import components.cli",
    "import torch": GC_OFF + "import torch",
    "torch + transformers' Qwen2 model code, nothing else": GC_OFF + "import torch, transformers.models.qwen2.modeling_qwen2",
}


def wall(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise SystemExit(f"bench_ask: {' '.join(cmd[:3])} failed: {(out.stderr or out.stdout).strip()[-400:]}")
    return time.perf_counter() - t0, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--question", default=QUESTION)
    args = ap.parse_args()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "MLFLOW_DISABLE_TELEMETRY": "true",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1"}  # fmt: skip
    ask = [str(BIN / "agentr1"), "ask", "--json", args.question]
    first = json.loads(wall(ask, env)[1])  # also fills ask's registry cache, as any earlier ask would have
    port = free_port()
    log = REPO / ".cache" / "bench_ask_serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = start([str(REPO / "scripts" / "serve.sh"), str(port)], REPO, env, log)
    try:
        wait_up(f"http://127.0.0.1:{port}/ping", proc, log, timeout=600)
        served = [str(BIN / "agentr1"), "ask", "--json", "--url", f"http://127.0.0.1:{port}", args.question]
        assert json.loads(wall(served, env)[1])["answer"] == first["answer"], "served and in-process answers differ"
        rows: dict[str, list[float]] = {}
        split: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for name, code in FLOORS.items():
                rows.setdefault(name, []).append(wall([sys.executable, "-c", code], env)[0])
            seconds, out = wall(ask, env)
            rows.setdefault("agentr1 ask (in-process)", []).append(seconds)
            for k, v in json.loads(out)["timings"].items():
                split.setdefault(k, []).append(v)
            rows.setdefault("agentr1 ask --url (served champion)", []).append(wall(served, env)[0])
    finally:
        stop(proc)
    print(f"# bench_ask: {cpu_line()}, load average {os.getloadavg()[0]:.1f} at start, {time.strftime('%Y-%m-%d')}, {args.repeats} rounds\n")
    print(f"Question: {args.question!r}; answer {first['answer']!r}; model: {first['model_name']} v{first['model_version']}\n")
    print("| process | median s | min s |\n|---|---|---|")
    for name, xs in rows.items():
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} |")
    print("\nIn-process ask's own split (median s): "
          + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in split.items() if k.endswith("_s")))


if __name__ == "__main__":
    main()
