"""MLflow runs: one per stage, nested under one parent run per pipeline run (Prefect flow, `dvc repro`, `dvc exp run`)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components.config import Config, flat_params
from components.io import out_of_space
from components.secrets import redact_params
from components.tracking.locks import store_lock
from components.tracking.owners import OWNER_TAG, end_dead_runs, owner
from components.tracking.tracker import MlflowTracker

STAGE_TAG = "agentr1.stage"
PARENT_ENV = "AGENTR1_PARENT_RUN_ID"  # set by whoever drives the CLI as one pipeline run (e.g. the Prefect flow)
PIPELINE_KEY_TAG = "agentr1.pipeline_key"  # the one `dvc repro` / `dvc exp run` process a parent run stands for
SHELLS = {"sh", "bash", "dash", "zsh", "fish"}


# What a pipeline's parent run shows at a glance on the runs page: EM/F1 of the agent and of each baseline per set
# (evaluate) as `<metric>/<dataset>/<split>/<system>`, so the chart view has one section per metric and set with a
# chart per system; and the registry's decision (register).
HEADLINE = re.compile(r"^(?:baseline/(?P<system>[^/]+)/)?(?P<metric>em|f1)/(?P<set>[^/]+/[^/]+)$")
HEADLINE_REGISTER = ("registered_version", "promoted", "champion_version")
# The runs table's columns for those: a shared view of the experiment (the MLflow UI's "Views"; `make ui` prints its
# URL), stored, as the UI stores one, in this experiment tag.
HEADLINE_VIEW = "agentr1-headline"
VIEW_TAG = "mlflow.sharedViewState."


def headline_key(key: str) -> str | None:
    """An evaluate metric's key on the parent run ("baseline/direct/em/synthetic/dev" -> "em/synthetic/dev/direct")."""
    m = HEADLINE.match(key)
    return f"{m['metric']}/{m['set']}/{m['system'] or 'agent'}" if m else None


class TrackingError(Exception):
    """The tracking setup cannot be used (e.g. AGENTR1_PARENT_RUN_ID names no run)."""


def project_root() -> Path:
    """The project the default store lives in: DVC_ROOT under DVC, else the working directory.

    A queued experiment (`dvc exp run --queue`, then `--run-all`) runs its stages in a temporary copy under
    .dvc/tmp/exps/; DVC points DVC_ROOT at the project it came from, so its runs land in the project's store.
    """
    return Path(os.environ.get("DVC_ROOT") or ".").resolve()


def tracking_uri(cfg: Config) -> str:
    """MLFLOW_TRACKING_URI wins, then params, then a sqlite store inside the project."""
    return (
        os.environ.get("MLFLOW_TRACKING_URI")
        or cfg.tracking.tracking_uri
        or f"sqlite:///{project_root() / 'mlflow.db'}"
    )


class _FullDiskRecords(logging.Filter):
    """Drops MLflow's logged traceback of a full disk: MLflow raises the error too, and the CLI reports it in one
    line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and out_of_space(record.exc_info[1]))


def quiet_full_disk_logs() -> None:
    log = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _FullDiskRecords) for f in log.filters):
        log.addFilter(_FullDiskRecords())


def setup(cfg: Config) -> str:
    """Point MLflow at the store, create the experiment if needed; return its id (no global experiment is set).

    One process at a time: the first use of a new sqlite store creates its tables, and two processes doing that at
    once (two queued experiments, two flow runs) fail with "duplicate column name" or lose the experiment.
    """
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    with store_lock(uri, "setup"):
        exp = mlflow.get_experiment_by_name(cfg.tracking.experiment)
        if exp is not None:
            return exp.experiment_id
        location = (project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
        return mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)


def commit(root: str | Path = ".") -> str:
    """Short git commit of `root`, '+dirty' when tracked files changed; 'nogit' outside a repository."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        sha = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "nogit"
    return sha + ("+dirty" if dirty else "")


def _pipeline_tags(name: str) -> dict[str, str]:
    return {STAGE_TAG: "pipeline", "agentr1.commit": commit(os.environ.get("DVC_ROOT", "."))} | (
        {"agentr1.dvc_exp": os.environ["DVC_EXP_NAME"]} if os.environ.get("DVC_EXP_NAME") else {})


@contextmanager
def pipeline_run(cfg: Config, name: str | None = None) -> Iterator[str]:
    """The parent run of one flow run, named after the commit unless `name` is given; yields its id."""
    import mlflow

    exp_id = setup(cfg)
    name = name or f"flow @ {commit()}"
    with mlflow.start_run(experiment_id=exp_id, run_name=name, tags=_pipeline_tags(name) | {OWNER_TAG: owner()}) as run:
        mlflow.log_params(redact_params(flat_params(cfg)))  # no secret is ever tracked
        yield run.info.run_id


@contextmanager
def stage_run(cfg: Config, stage: str, parent_run_id: str | None = None) -> Iterator[MlflowTracker]:
    """An MLflow run for one stage, active in this thread; FAILED status if the stage raises."""
    import mlflow

    exp_id = setup(cfg)
    end_dead_runs(mlflow.MlflowClient(), exp_id)  # runs of killed stages (SIGKILL) end here, as KILLED
    with mlflow.start_run(
        experiment_id=exp_id,
        run_name=stage,
        nested=parent_run_id is not None,
        parent_run_id=parent_run_id,
        tags={STAGE_TAG: stage, OWNER_TAG: owner()},
    ) as run:
        mlflow.log_params(redact_params(flat_params(cfg)))  # no secret is ever tracked
        yield MlflowTracker(run.info.run_id)


def _dvc_process() -> tuple[str, str] | None:
    """(key, name) of the `dvc repro` / `dvc exp run` process running this stage, None outside DVC.

    DVC sets DVC_STAGE (and DVC_ROOT) in every stage command's environment, and DVC_EXP_NAME under
    `dvc exp run`, but no id of one repro: its process is. DVC runs each command through a shell, so
    the first ancestor that is not a shell is the dvc process; its pid and start time name it.
    """
    if not os.environ.get("DVC_STAGE"):
        return None
    import psutil  # a dependency of dvc

    proc = psutil.Process().parent()
    while proc is not None and proc.name() in SHELLS:
        proc = proc.parent()
    if proc is None:
        return None
    exp = os.environ.get("DVC_EXP_NAME")
    key = f"{os.environ.get('DVC_ROOT', '')}:{proc.pid}:{proc.create_time():.3f}:{exp or ''}"
    rev = commit(os.environ.get("DVC_ROOT", "."))
    return key, (f"dvc exp {exp} @ {rev}" if exp else f"dvc repro @ {rev}")


def _dvc_parent(cfg: Config, key: str, name: str) -> str:
    """The parent run of one dvc process: found by its key tag, created by the first stage."""
    import mlflow
    from mlflow.entities import Param

    exp_id = setup(cfg)  # first: a client made before it would use MLflow's default store in the working directory
    client = mlflow.MlflowClient()
    found = client.search_runs([exp_id], filter_string=f"tags.`{PIPELINE_KEY_TAG}` = '{key}'", max_results=1)
    if found:
        return found[0].info.run_id
    run = client.create_run(exp_id, run_name=name, tags=_pipeline_tags(name) | {PIPELINE_KEY_TAG: key})
    params = [Param(k, v) for k, v in redact_params(flat_params(cfg)).items()]
    for i in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[i : i + 100])
    return run.info.run_id


@contextmanager
def cli_parent(cfg: Config) -> Iterator[str | None]:
    """The run a CLI stage nests under: AGENTR1_PARENT_RUN_ID, else the parent of the DVC process, else none.

    A DVC parent is RUNNING while one of its stages runs and ends FINISHED or FAILED with the last one.
    """
    import mlflow
    from mlflow.exceptions import MlflowException

    given = os.environ.get(PARENT_ENV, "").strip()
    if given:
        setup(cfg)
        try:
            mlflow.MlflowClient().get_run(given)
        except MlflowException:
            raise TrackingError(f"{PARENT_ENV}={given}: no such MLflow run in {tracking_uri(cfg)}") from None
        yield given
        return
    dvc = _dvc_process()
    if dvc is None:
        yield None
        return
    parent = _dvc_parent(cfg, *dvc)
    client = mlflow.MlflowClient()
    client.update_run(parent, status="RUNNING")
    client.set_tag(parent, OWNER_TAG, owner())  # RUNNING while this stage runs: ended as KILLED if it is killed
    status = "FAILED"
    try:
        yield parent
        status = "FINISHED"
    finally:
        client.set_terminated(parent, status)


def log_headline(parent_run_id: str, stage: str, metrics: dict[str, float], stage_run_id: str | None = None) -> None:
    """Copy a stage's headline metrics onto the pipeline's parent run; for register also its decision (a tag)."""
    import mlflow
    from mlflow.entities import Metric, RunTag

    from components.tracking.tracker import metric_key

    if stage == "evaluate":
        keep = {headline_key(k): v for k, v in metrics.items() if headline_key(k)}
    elif stage == "register":
        keep = {k: v for k, v in metrics.items() if k in HEADLINE_REGISTER}
    else:
        return
    client = mlflow.MlflowClient()
    tags = []
    if stage == "register" and stage_run_id is not None:
        decision = client.get_run(stage_run_id).data.tags.get("decision")
        tags = [RunTag("agentr1.decision", decision)] if decision else []
    now = int(time.time() * 1000)
    client.log_batch(parent_run_id, metrics=[Metric(metric_key(k), float(v), now, 0) for k, v in keep.items()], tags=tags)
    columns = [k for k in keep if k.startswith("em/")] + (["champion_version"] if "champion_version" in keep else [])
    if columns:
        _extend_view(client, client.get_run(parent_run_id).info.experiment_id, [metric_key(k) for k in columns])


def _extend_view(client, experiment_id: str, metrics: list[str]) -> None:
    """Add metric columns to the experiment's headline view of the runs table (kept across pipeline runs)."""
    import json

    tag = VIEW_TAG + HEADLINE_VIEW
    try:
        old = json.loads(client.get_experiment(experiment_id).tags.get(tag, "{}")).get("selectedColumns", [])
    except (ValueError, AttributeError):
        old = []
    columns = list(dict.fromkeys(old + [f"metrics.`{m}`" for m in metrics]))
    client.set_experiment_tag(experiment_id, tag, json.dumps({"selectedColumns": columns}))
