"""The pipeline as a Prefect flow: each task asks DVC to reproduce one stage. Wiring only.

    python -m flows.pipeline [--stages prepare,validate,index]

DVC alone decides what must re-run (dvc.yaml deps and params, dvc.lock): a task runs
`dvc repro --single-item <stage>` in pipeline order, so an up-to-date stage costs one check. The flow opens the
MLflow `pipeline` run and passes its id to every stage through AGENTR1_PARENT_RUN_ID, so the stage runs nest
under it. Runs in Prefect's ephemeral mode unless PREFECT_API_URL points at a server.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from components.config import load_config
from components.env import apply_defaults
from components.stages import STAGES

PARENT_RUN_ENV = "AGENTR1_PARENT_RUN_ID"
# Stages whose work crosses a network or a server (Elasticsearch) get retries; the rest fail fast.
RETRIES = {"index": 2, "retrieval_eval": 2}
MAX_REASON_LINES = 20  # of a stage's error, carried into the flow run's state message

# DVC's own log lines for the three outcomes of one stage.
OUTCOMES = {
    "ran": re.compile(r"Running stage '([\w.]+)'"),
    "restored": re.compile(r"Stage '([\w.]+)' is cached - skipping run"),
    "up_to_date": re.compile(r"Stage '([\w.]+)' didn't change, skipping"),
}


class StageFailed(RuntimeError):
    """`dvc repro` of one stage failed; the message is the stage's own error text."""


def dvc_bin() -> str:
    """The `dvc` beside this interpreter (the project's venv), else the one on PATH."""
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


def outcome(stage: str, output: str) -> str:
    for name, pattern in OUTCOMES.items():
        if stage in pattern.findall(output):
            return name
    raise StageFailed(f"{stage}: dvc repro reported no outcome:\n{output[-2000:]}")


def failure_reason(stage: str, output: str) -> str:
    """The stage's own error (`agentr1 <stage> failed: ...` and the lines it adds), else DVC's ERROR line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith(f"agentr1 {stage} failed:")]
    if starts:
        own = lines[starts[-1]:]
        end = next((i for i, line in enumerate(own) if line.startswith("ERROR")), len(own))
        reason = "\n".join(own[: min(end, MAX_REASON_LINES)])
    else:  # an unexpected exception: its last traceback line, then DVC's ERROR line
        first_error = next((i for i, line in enumerate(lines) if line.startswith("ERROR")), len(lines))
        reason = " | ".join(lines[max(first_error - 1, 0): first_error + 1]) or "no output"
    return f"stage {stage} failed: {reason}"


@task(task_run_name="{name}", cache_policy=NO_CACHE)
def reproduce(name: str, parent_run_id: str | None) -> str:
    """`dvc repro --single-item <name>`; returns ran | restored | up_to_date, or raises StageFailed."""
    logger = get_run_logger()
    env = dict(os.environ)
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    proc = subprocess.run([dvc_bin(), "repro", "--single-item", name], env=env, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    if output.strip():
        logger.info(output.strip()[-20000:])
    if proc.returncode != 0:
        raise StageFailed(failure_reason(name, output))
    result = outcome(name, output)
    logger.info("%s: %s", name, result)
    return result


@flow(name="agentr1-pipeline", log_prints=True)
def pipeline(stages: list[str] | None = None) -> dict[str, str]:
    """prepare → validate → index → retrieval_eval → base_model → train → evaluate → register, through DVC."""
    from components.tracking.runs import pipeline_run

    unknown = set(stages or []) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; known: {list(STAGES)}")
    selected = [s for s in STAGES if stages is None or s in stages]
    cfg = load_config("params.yaml")
    results: dict[str, str] = {}
    with pipeline_run(cfg) as parent_run_id:
        for name in selected:
            task_fn = reproduce.with_options(retries=RETRIES.get(name, 0), retry_delay_seconds=5)
            results[name] = task_fn(name, parent_run_id)
    ran = [s for s, r in results.items() if r != "up_to_date"]
    print(f"stages re-run: {', '.join(ran)}" if ran else "every stage up to date: nothing re-ran")
    return results


def main() -> None:
    apply_defaults()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", default=None, help="comma-separated subset, in pipeline order")
    args = parser.parse_args()
    pipeline(stages=args.stages.split(",") if args.stages else None)


if __name__ == "__main__":
    main()
