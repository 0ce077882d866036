"""The scheduled deployment: the pipeline flow on the cron schedule in params (`schedule.cron`).

    python -m flows.deploy            # serve: create/refresh the deployment and run it when scheduled
    PREFECT_API_URL=http://host:4200/api python -m flows.deploy
"""

from __future__ import annotations

import argparse
from typing import Any

from components.config import load_config
from components.env import apply_defaults
from flows.pipeline import pipeline

DEPLOYMENT = "nightly"


def serve(params_path: str = "params.yaml", stages: list[str] | None = None, limit: int | None = None) -> None:
    cfg = load_config(params_path)
    parameters: dict[str, Any] = {"params_path": params_path, "stages": stages}
    pipeline.serve(
        name=DEPLOYMENT,
        cron=cfg.schedule.cron,
        parameters=parameters,
        tags=["agentr1"],
        description="Re-index and retrain when the corpus or data changed (cached stages are skipped).",
        limit=limit,
    )


def main() -> None:
    apply_defaults()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--stages", default=None, help="comma-separated subset of stages")
    args = parser.parse_args()
    serve(args.params, args.stages.split(",") if args.stages else None)


if __name__ == "__main__":
    main()
