"""Exhaustive kill -9 / resume probe of the local trainer: for each scenario, an uninterrupted `train`
stage and one SIGKILLed at several points and resumed to the end; weights (torch.equal), curve.csv,
dev_curve.csv and the MLflow metric history (real sqlite store: every step once) must be identical.

    python checks/resume_probe.py [scenario ...]      # default: all; prints one line per scenario

Kill points: step:N (step N done, not evaluated/checkpointed), evalstart:N (inside evaluation N), eval:N
(evaluated, not checkpointed), writing:N (checkpoint N fully written in its temp dir, not yet moved in place),
saved:N (checkpoint N in place, its metrics not yet in MLflow). Slow (minutes): not part of the test suite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCENARIOS: dict[str, tuple[dict, list[str]]] = {
    # name: (overrides of tests/test_rl_train.resume_raw: 10 GRPO steps, eval every 2, checkpoint every 3), kills
    "grpo": ({}, ["evalstart:4", "writing:6", "eval:8", "saved:9", "step:10"]),
    "stop_at_target": ({"train": {"target_em": 0.0, "stop_at_target": True}}, ["saved:2"]),
    "ppo": ({"train": {"algorithm": "ppo", "steps": 6}}, ["writing:3", "eval:4"]),
    "kl_entropy": ({"train": {"kl_coef": 0.1, "entropy_coef": 0.01, "steps": 6}}, ["saved:3", "step:5"]),
    "process_rewards": ({"train": {"steps": 6}, "agent": {"reward": {
        "valid_call": 0.1, "supporting": 0.2, "new_info": 0.05, "search_cost": 0.01, "invalid_call": 0.1,
        "format_penalty": 0.1}}}, ["step:2", "evalstart:4"]),  # fmt: skip
    "micro_epochs": ({"train": {"micro_batch_size": 1, "ppo_epochs": 2, "algorithm": "rloo", "steps": 6}},
                     ["eval:2", "saved:3"]),
    "long30": ({"train": {"steps": 30, "eval_every": 10, "checkpoint_every": 5}}, ["step:7", "evalstart:20", "saved:25"]),
}


def base_raw(art: Path) -> dict:
    from tests.test_rl_train import resume_raw

    return resume_raw(art)


def merged(raw: dict, over: dict) -> dict:
    out = json.loads(json.dumps(raw))
    for section, vals in over.items():
        node = out.setdefault(section, {})
        stack = [(node, vals)]
        while stack:
            n, v = stack.pop()
            for k, x in v.items():
                if isinstance(x, dict):
                    stack.append((n.setdefault(k, {}), x))
                else:
                    n[k] = x
    return out


RUNNER = r"""
import json, os, signal, sys
from contextlib import contextmanager
from pathlib import Path
from components.config import parse_config
from components.train.local import checkpoint as ckpt, train
from components.stages import run_stage

raw = json.loads(sys.argv[1]); where, _, at = sys.argv[2].partition(":")
def die(point, n):
    if point == where and n == int(at):
        print("KILLED", point, n, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
step, evaluate, save, atomic = train.Trainer.step, train.Trainer.evaluate, ckpt.save, ckpt.atomic_path
def step_(self, s):
    out = step(self, s); die("step", s + 1); return out
def evaluate_(self, n):
    die("evalstart", n); out = evaluate(self, n); die("eval", n); return out
def save_(root, n, *a, **k):
    @contextmanager
    def atomic_(target, *a, **k):
        with atomic(target, *a, **k) as tmp:
            yield tmp
            die("writing", n)
    ckpt.atomic_path = atomic_
    try:
        out = save(root, n, *a, **k)
    finally:
        ckpt.atomic_path = atomic
    die("saved", n); return out
train.Trainer.step, train.Trainer.evaluate, ckpt.save = step_, evaluate_, save_
run_stage("train", parse_config(raw))
"""


def train(art: Path, raw: dict, kill: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{art.parent / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-c", RUNNER, json.dumps(raw), kill or "none:0"], capture_output=True,
                          text=True, env=env, cwd=art.parent, timeout=1800)  # fmt: skip


def outputs(art: Path) -> dict:
    import csv
    import re

    import torch
    from mlflow.tracking import MlflowClient
    from safetensors.torch import load_file

    def table(name):
        with open(art / "train" / name, newline="") as f:
            return [{k: v for k, v in r.items() if not re.search(r"_s$", k)} for r in csv.DictReader(f)]

    client = MlflowClient(f"sqlite:///{art.parent / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    [run] = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1,
                               order_by=["attributes.start_time DESC"])  # fmt: skip
    hist = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)]
            for k in run.data.metrics if not re.search(r"_s$|stage_seconds", k)}  # fmt: skip
    dup = {k: [s for s, _ in h] for k, h in hist.items() if len({s for s, _ in h}) != len(h)}
    return {"weights": load_file(art / "models" / "trained" / "model.safetensors"), "curve": table("curve.csv"),
            "dev": table("dev_curve.csv"), "mlflow": {k: sorted(h) for k, h in hist.items()}, "dup": dup,
            "leftovers": sorted(p.name for p in (art / "train" / "checkpoints").rglob(".*") if p.name != ".lock"),
            "torch": torch}  # fmt: skip


def compare(ref: dict, got: dict) -> list[str]:
    torch = ref["torch"]
    bad = []
    w0, w1 = ref["weights"], got["weights"]
    diff = [k for k in w0 if not torch.equal(w0[k], w1.get(k))]
    if diff:
        bad.append(f"weights differ ({len(diff)} tensors, e.g. {diff[0]})")
    for key in ("curve", "dev", "mlflow"):
        if ref[key] != got[key]:
            if key == "mlflow":
                ks = [k for k in ref[key] if ref[key][k] != got[key].get(k)]
                bad.append(f"mlflow history differs for {len(ks)} keys, e.g. {ks[:3]}")
            else:
                steps = [r.get("step") for r, g in zip(ref[key], got[key]) if r != g]
                bad.append(f"{key} differs (steps {steps[:5]}, rows {len(ref[key])} vs {len(got[key])})")
    for name, out in (("ref", ref), ("resumed", got)):
        if out["dup"]:
            bad.append(f"{name}: MLflow steps logged twice: {dict(list(out['dup'].items())[:3])}")
    if got["leftovers"]:
        bad.append(f"temp leftovers under checkpoints: {got['leftovers'][:3]}")
    return bad


def primed_art(cache: Path) -> Path:
    import components.data.prepare as prepare
    import components.base_model.base_model as base_model
    import components.retrieval.index as index
    from components.config import parse_config
    from components.tracking.tracker import NullTracker

    art = cache / "art"
    if not (art / "models" / "base").is_dir():
        cfg = parse_config(base_raw(art))
        prepare.run(cfg, NullTracker())
        index.run(cfg, NullTracker())
        base_model.run(cfg, NullTracker())
    return art


def run_scenario(name: str, primed: Path, work: Path) -> str:
    over, kills = SCENARIOS[name]
    t0 = time.time()
    arts = {}
    for kind in ("ref", "killed"):
        art = work / name / kind / "art"
        shutil.copytree(primed, art)
        arts[kind] = art
    raw_ref, raw_k = merged(base_raw(arts["ref"]), over), merged(base_raw(arts["killed"]), over)
    done = train(arts["ref"], raw_ref)
    if done.returncode != 0:
        return f"{name}: reference run failed: {done.stderr[-800:]}"
    for kill in kills:
        proc = train(arts["killed"], raw_k, kill)
        if proc.returncode != -signal.SIGKILL:
            return f"{name}: run meant to die at {kill} exited {proc.returncode}: {proc.stderr[-800:]}"
    resumed = train(arts["killed"], raw_k)
    if resumed.returncode != 0:
        return f"{name}: resume failed: {resumed.stderr[-800:]}"
    bad = compare(outputs(arts["ref"]), outputs(arts["killed"]))
    verdict = "IDENTICAL" if not bad else "DIVERGED: " + "; ".join(bad)
    return f"{name}: kills {','.join(kills)} -> {verdict} ({time.time() - t0:.0f} s)"


def main(names: list[str]) -> int:
    cache = Path(os.environ.get("RESUME_PROBE_CACHE", ROOT / ".cache" / "resume_probe"))
    cache.mkdir(parents=True, exist_ok=True)
    primed = primed_art(cache)
    failed = 0
    with tempfile.TemporaryDirectory(dir=cache) as work:
        for name in names or list(SCENARIOS):
            line = run_scenario(name, primed, Path(work))
            failed += "IDENTICAL" not in line
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
