"""The pipeline as a Prefect flow: the same stages DVC runs, chained as tasks. Wiring only.

    python -m flows.pipeline [--params params.yaml] [--stages prepare,validate,index]

Runs in Prefect's ephemeral mode unless PREFECT_API_URL points at a server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, task

from components.config import Config, load_config
from components.env import apply_defaults
from components.stages import STAGES, run_stage

# Stages whose work crosses a network or a server (Elasticsearch) get retries; the rest fail fast.
RETRIES = {"index": 2, "retrieval_eval": 2}


def _dvc_stage(name: str) -> dict[str, Any]:
    stages = yaml.safe_load(Path("dvc.yaml").read_text())["stages"]
    return stages.get(name, {})


def _fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) if path.is_dir() else [path]
    for f in files:
        h.update(str(f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def outputs_present(name: str) -> bool:
    spec = _dvc_stage(name)
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in spec.get("outs", []) + spec.get("metrics", [])]
    return all(Path(o).exists() for o in outs)


def stage_cache_key(name: str, cfg: Config) -> str:
    """Key = stage + config + content of the stage's DVC deps (the same inputs DVC tracks)."""
    spec = _dvc_stage(name)
    h = hashlib.sha256(name.encode())
    h.update(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode())
    for dep in spec.get("deps", []):
        if Path(dep).exists():
            h.update(_fingerprint(Path(dep)).encode())
    return h.hexdigest()


def _cache_key_fn(context, arguments: dict[str, Any]) -> str:
    return stage_cache_key(arguments["name"], arguments["cfg"])


@task(task_run_name="{name}", cache_key_fn=_cache_key_fn, persist_result=True)
def stage(name: str, cfg: Config, parent_run_id: str | None) -> dict[str, float]:
    return run_stage(name, cfg, parent_run_id=parent_run_id)


@flow(name="agentr1-pipeline", log_prints=True)
def pipeline(
    params_path: str = "params.yaml", overrides: dict[str, Any] | None = None, stages: list[str] | None = None
) -> dict[str, dict[str, float]]:
    """prepare → validate → index → retrieval_eval → base_model → train → evaluate → register."""
    from components.tracking.runs import pipeline_run

    cfg = load_config(params_path, overrides)
    selected = [s for s in STAGES if stages is None or s in stages]
    unknown = set(stages or []) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; known: {list(STAGES)}")
    results: dict[str, dict[str, float]] = {}
    with pipeline_run(cfg) as parent_run_id:
        for name in selected:
            # A deleted output invalidates the cache entry: run, and store the fresh result under the key.
            task_fn = stage.with_options(
                retries=RETRIES.get(name, 0), retry_delay_seconds=5, refresh_cache=not outputs_present(name)
            )
            results[name] = task_fn(name, cfg, parent_run_id)
    return results


def main() -> None:
    apply_defaults()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--stages", default=None, help="comma-separated subset, in pipeline order")
    args = parser.parse_args()
    pipeline(params_path=args.params, stages=args.stages.split(",") if args.stages else None)


if __name__ == "__main__":
    main()
