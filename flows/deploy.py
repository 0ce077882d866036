"""The scheduled deployment: the pipeline flow on the cron schedule in params (`schedule.cron`, `schedule.timezone`).

    python -m flows.deploy            # serve: create/refresh the deployment and run it when scheduled
    PREFECT_API_URL=http://host:4200/api python -m flows.deploy

Each scheduled run asks DVC to reproduce every stage: a new version of data/ (or changed code or params)
re-runs what depends on it, and an unchanged project costs one up-to-date check per stage.
"""

from __future__ import annotations

import argparse
import asyncio

from prefect.schedules import Cron

from components.config import load_config
from components.env import apply_defaults
from flows.pipeline import pipeline

DEPLOYMENT = "nightly"


async def crash_orphans() -> list[str]:
    """Mark CRASHED the runs of this deployment still RUNNING or PENDING from a serving process that is gone (the
    host restarted, the process was killed): this process is about to be the deployment's only runner, so none of
    them can still be running. Returns their names."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterDeploymentId, FlowRunFilterState,
                                                FlowRunFilterStateType)  # fmt: skip
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    async with get_client() as client:
        try:
            deployment = await client.read_deployment_by_name(f"{pipeline.name}/{DEPLOYMENT}")
        except ObjectNotFound:
            return []
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING]))))  # fmt: skip
        for run in runs:
            message = "its serving process was gone when the deployment started again (host restart or kill)"
            await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
        return [run.name for run in runs]


def serve(params_path: str = "params.yaml", stages: list[str] | None = None, limit: int | None = 1) -> None:
    """`limit`: flow runs at once; one, since two `dvc repro` in one workspace would contend for DVC's lock."""
    cfg = load_config(params_path)
    for name in asyncio.run(crash_orphans()):
        print(f"flow run {name}: marked CRASHED, its serving process was gone", flush=True)
    pipeline.serve(
        name=DEPLOYMENT,
        schedules=[Cron(cfg.schedule.cron, timezone=cfg.schedule.timezone)],
        parameters={"stages": stages},
        tags=["agentr1"],
        description="Reproduce the pipeline through DVC: re-index, retrain, evaluate and register when data, code "
        "or params changed; a failed stage leaves the live index alias and the champion as they were.",
        limit=limit,
    )


def main() -> None:
    apply_defaults()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml", help="where the schedule is read from")
    parser.add_argument("--stages", default=None, help="comma-separated subset of stages")
    args = parser.parse_args()
    serve(args.params, args.stages.split(",") if args.stages else None)


if __name__ == "__main__":
    main()
