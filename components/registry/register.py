"""The `register` stage: the agent as a pyfunc model version in the MLflow Model Registry, with compact evidence;
the champion alias moves only when the version passes the champion gate (gate.py). Full evaluation metrics stay on
the evaluate run and the logged model."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from components import artifacts
from components.config import Config
from components.evaluation.eval_json import flat_metrics
from components.io import disk_full, free_space, full_at, out_of_space, same_disk, sha256_of, size_of, write_json
from components.registry.gate import champion, judge
from components.serving.agent import model_corpus
from components.serving.pyfunc import about_model, log_agent_model
from components.registry.promote import move_champion
from components.registry.registration import (COMPLETE, PENDING, REGISTRATION_TAG, RegistrationError,
                                              discard_logged_model, local_dir, missing_files, recover, registry_lock)  # fmt: skip
from components.tracking.runs import STAGE_TAG, tracking_uri
from components.tracking.tracker import NullTracker, metric_key

log = logging.getLogger(__name__)
EVIDENCE = "evidence"  # tag prefix on the model version: decision, eval_run (the comparisons: gate.*)


@dataclass(frozen=True)
class Decision:
    model_name: str
    version: str
    metric: str
    value: float
    champion_version: str | None
    champion_value: float | None
    promoted: bool
    reason: str
    gate: dict[str, str]  # each comparison of the champion gate, as tagged on the version


def _lineage(cfg: Config) -> dict[str, str]:
    """Digests of the data and the index versions the model was trained and evaluated on."""
    tags: dict[str, str] = {}
    for name, path in (("questions", artifacts.questions(cfg)), ("passages", artifacts.passages(cfg))):
        if path.exists():
            tags[f"data.{name}.sha256"] = sha256_of(path)
    manifest = artifacts.index_manifest(cfg)
    if manifest.exists():
        for alias, info in json.loads(manifest.read_text()).items():
            tags[f"index.{alias}.version"] = str(info.get("version"))
    return tags


def _eval_run(client, cfg: Config, metric: str, value: float, train_run_id: str | None):
    """The finished evaluate run that produced `value` for the model of `train_run_id` (the latest such run)."""
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    if exp is None:
        return None
    after = client.get_run(train_run_id).info.start_time if train_run_id else 0
    runs = client.search_runs([exp.experiment_id], f"tags.`{STAGE_TAG}` = 'evaluate' and attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"], max_results=100)  # fmt: skip
    for r in runs:
        got = r.data.metrics.get(metric_key(metric))
        if r.info.start_time >= after and got is not None and math.isclose(got, value, abs_tol=1e-9):
            return r
    return None


def run_link(cfg: Config, run) -> str:
    """The run's page in the MLflow UI: absolute on a tracking server, else the UI route."""
    route = f"#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    uri = tracking_uri(cfg)
    return f"{uri.rstrip('/')}/{route}" if uri.startswith(("http://", "https://")) else route


def log_complete(cfg: Config, hf_dir: Path):
    """Log the agent model and check that every file of `hf_dir` arrived whole; else remove what was written and
    raise (DiskFull on a full disk). Returns the ModelInfo."""
    import mlflow
    from mlflow.entities import LoggedModelStatus

    client = mlflow.MlflowClient()
    before = _last_logged_model_id()
    try:
        info = log_agent_model(cfg, hf_dir, model_corpus(cfg))
    except Exception as err:
        failed = client.get_logged_model(_last_logged_model_id()) if _last_logged_model_id() != before else None
        where = local_dir(failed.artifact_location) if failed is not None else None
        if failed is not None and failed.status != LoggedModelStatus.READY:
            discard_logged_model(client, failed)
        if out_of_space(err, where):
            copies = 2 if where is not None and same_disk(where, tempfile.gettempdir()) else 1  # MLflow's, the store's
            raise disk_full(_full_dir(err, where), need=copies * size_of(hf_dir)) from None
        raise
    expected = {f"artifacts/{hf_dir.name}/{p.relative_to(hf_dir).as_posix()}": p.stat().st_size
                for p in sorted(hf_dir.rglob("*")) if p.is_file()}  # fmt: skip
    missing = missing_files(client, info.model_id, expected | {"MLmodel": None})
    if missing:
        discard_logged_model(client, client.get_logged_model(info.model_id))
        raise RegistrationError(f"logged model {info.model_id} is incomplete, not registered: {', '.join(missing[:5])}")
    return info


def _full_dir(err: BaseException, store: Path | None) -> Path | str:
    """Where the model's write found the disk full: the artifact store, or the temp dir MLflow saves it in first
    (the file the error names, else the one of the two with the least space free)."""
    places = [p for p in (store, Path(tempfile.gettempdir())) if p is not None]
    failed = full_at(err)
    named = [p for p in places if failed is not None and Path(failed).is_relative_to(p)]
    if named:
        return named[0]
    return min(places, key=free_space) if places else "the MLflow artifact store"


def _last_logged_model_id() -> str | None:
    """The id of the model this process logged last (MLflow keeps it even when the logging failed)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        last = mlflow.last_logged_model()
    except MlflowException:  # deleted since
        return None
    return last.model_id if last is not None else None


def refuse_temporary_copy(workdir: Path) -> None:
    """A queued DVC experiment runs in a copy under .dvc/tmp/exps/ that DVC deletes when it ends: a model registered
    there would name an index that is gone, and could still become the champion."""
    if ".dvc/tmp/exps/" in workdir.resolve().as_posix() + "/":
        raise RegistrationError(f"register: {workdir} is a queued experiment's temporary copy; register from the "
                                "workspace: `dvc exp apply <experiment>`, then `dvc repro register`")  # fmt: skip


def run(cfg: Config, tracker: NullTracker) -> dict[str, float]:
    import mlflow

    refuse_temporary_copy(Path.cwd())
    reg = cfg.registry
    metrics_path = artifacts.require(cfg, artifacts.eval_metrics(cfg))
    model_path = artifacts.require(cfg, artifacts.train_model_json(cfg))
    eval_metrics = flat_metrics(json.loads(metrics_path.read_text()))
    if reg.metric not in eval_metrics:
        raise KeyError(f"registry.metric {reg.metric!r} not in {metrics_path} (have: {sorted(eval_metrics)[:20]})")
    trained = json.loads(model_path.read_text())
    hf_dir = Path(trained.get("path") or artifacts.trained_model(cfg))
    client = mlflow.MlflowClient()
    with registry_lock(tracking_uri(cfg)):  # one registration at a time: the champion decision sees the last one
        exp = client.get_experiment_by_name(cfg.tracking.experiment)
        cleaned = recover(client, exp.experiment_id if exp else None, reg.model_name)
        for line in cleaned:
            log.warning("register: %s", line)
        if cleaned:
            tracker.set_tags({"recovered": " | ".join(cleaned)[:5000]})
        return _register(cfg, tracker, client, eval_metrics, trained, hf_dir)


def _register(cfg: Config, tracker, client, eval_metrics: dict[str, float], trained: dict, hf_dir: Path) -> dict[str, float]:
    import mlflow
    from mlflow.exceptions import MlflowException

    reg = cfg.registry
    value = eval_metrics[reg.metric]
    info = log_complete(cfg, hf_dir)
    if tracker.run_id is not None:  # every metric on the register run and the logged model, none on the version
        mlflow.log_metrics({metric_key(k): v for k, v in eval_metrics.items()}, run_id=tracker.run_id, model_id=info.model_id)

    try:  # also a model whose first registration was killed before its description was written
        first = not client.get_registered_model(reg.model_name).description
    except MlflowException:
        first = True  # register_model creates it (creating it here first made MLflow say it "already exists")
    champion_version, champion_value = champion(client, reg)
    verdict = judge(reg, eval_metrics, champion_version, champion_value)
    promoted, reason = verdict.promoted, verdict.reason
    eval_run = _eval_run(client, cfg, reg.metric, value, trained.get("run_id"))
    evidence = {reg.metric: f"{value:.6g}", f"{EVIDENCE}.decision": reason,
                f"{EVIDENCE}.eval_run": run_link(cfg, eval_run) if eval_run else "not found"} | verdict.tags()  # fmt: skip
    # pending until its description is written too: a kill before then leaves a version the next run deletes
    mv = mlflow.register_model(info.model_uri, reg.model_name, tags=evidence | _lineage(cfg) | {REGISTRATION_TAG: PENDING})
    if first:
        client.update_registered_model(reg.model_name, description="agentr1 search agent (Agent-R1 end-to-end RL)")
    link = f"[evaluation run]({evidence[f'{EVIDENCE}.eval_run']})" if eval_run else "evaluation run not found"
    about = about_model(cfg, hf_dir)  # the model, its world, its training data
    client.update_model_version(reg.model_name, mv.version,
                                f"{about}.\n\n{reason}. {link}; all metrics on that run and on this logged model.")  # fmt: skip
    client.set_model_version_tag(reg.model_name, mv.version, REGISTRATION_TAG, COMPLETE)
    if promoted:  # recorded like a manual promotion, so `agentr1 rollback` can undo it
        move_champion(client, cfg, str(mv.version), "register", reason)

    decision = Decision(reg.model_name, str(mv.version), reg.metric, value, champion_version, champion_value, promoted,
                        reason, verdict.tags())  # fmt: skip
    write_json(artifacts.decision(cfg), asdict(decision))
    tracker.log_dict(asdict(decision), "register/decision.json")
    tracker.set_tags({"registered_version": str(mv.version), "promoted": str(promoted), "decision": reason})
    champion_now = mv.version if promoted else champion_version
    return {"registered_version": float(mv.version), "promoted": float(promoted),
            "champion_version": float(champion_now) if champion_now is not None else 0.0, reg.metric: value}  # fmt: skip
