"""MLflow runs: one per stage, nested under a pipeline run when a flow drives the stages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components.config import Config, flatten
from components.secrets import redact_params
from components.tracking.tracker import MlflowTracker

STAGE_TAG = "agentr1.stage"


def tracking_uri(cfg: Config) -> str:
    """MLFLOW_TRACKING_URI wins, then params, then a sqlite store inside the project."""
    return (
        os.environ.get("MLFLOW_TRACKING_URI")
        or cfg.tracking.tracking_uri
        or f"sqlite:///{Path('mlflow.db').resolve()}"
    )


def setup(cfg: Config) -> str:
    """Point MLflow at the store, create the experiment if needed; return its id (no global experiment is set)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(cfg))
    exp = mlflow.get_experiment_by_name(cfg.tracking.experiment)
    if exp is None:
        location = None
        if tracking_uri(cfg).startswith("sqlite:"):
            location = Path("mlartifacts").resolve().as_uri()
        exp_id = mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)
    else:
        exp_id = exp.experiment_id
    return exp_id


@contextmanager
def pipeline_run(cfg: Config, name: str = "pipeline") -> Iterator[str]:
    """The parent run of one flow run; yields its id."""
    import mlflow

    exp_id = setup(cfg)
    with mlflow.start_run(experiment_id=exp_id, run_name=name, tags={STAGE_TAG: "pipeline"}) as run:
        mlflow.log_params(redact_params(flatten(cfg)))  # no secret is ever tracked
        yield run.info.run_id


@contextmanager
def stage_run(cfg: Config, stage: str, parent_run_id: str | None = None) -> Iterator[MlflowTracker]:
    """An MLflow run for one stage, active in this thread; FAILED status if the stage raises."""
    import mlflow

    exp_id = setup(cfg)
    with mlflow.start_run(
        experiment_id=exp_id,
        run_name=stage,
        nested=parent_run_id is not None,
        parent_run_id=parent_run_id,
        tags={STAGE_TAG: stage},
    ) as run:
        mlflow.log_params(redact_params(flatten(cfg)))  # no secret is ever tracked
        yield MlflowTracker(run.info.run_id)
