"""The `register` stage: the agent as a pyfunc model version in the MLflow Model Registry, with compact evidence;
the champion alias moves only on a win. Full evaluation metrics stay on the evaluate run and the logged model."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from components import artifacts
from components.config import Config
from components.evaluation.report import flatten
from components.io import write_json
from components.serving.agent import model_corpus
from components.serving.pyfunc import about_model, log_agent_model
from components.tracking.promote import move_champion
from components.tracking.runs import STAGE_TAG, tracking_uri
from components.tracking.tracker import NullTracker, file_digest, metric_key

EVIDENCE = "evidence"  # tag prefix on the model version: compared_to, decision, eval_run


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


def decide(metric: str, value: float, champion_value: float | None, min_improvement: float) -> tuple[bool, str]:
    if champion_value is None:
        return True, f"no champion yet; {metric}={value:.4f}"
    if value > champion_value + min_improvement:
        return True, f"{metric}={value:.4f} beats champion {champion_value:.4f} (+{value - champion_value:.4f})"
    return False, f"{metric}={value:.4f} does not beat champion {champion_value:.4f} by more than {min_improvement}"


def _lineage(cfg: Config) -> dict[str, str]:
    """Digests of the data and the index versions the model was trained and evaluated on."""
    tags: dict[str, str] = {}
    for name, path in (("questions", artifacts.questions(cfg)), ("passages", artifacts.passages(cfg))):
        if path.exists():
            tags[f"data.{name}.sha256"] = file_digest(path)
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


def run(cfg: Config, tracker: NullTracker) -> dict[str, float]:
    import mlflow
    from mlflow.exceptions import MlflowException

    reg = cfg.registry
    metrics_path = artifacts.require(cfg, artifacts.eval_metrics(cfg))
    model_path = artifacts.require(cfg, artifacts.train_model_json(cfg))
    eval_metrics = flatten(json.loads(metrics_path.read_text()))
    if reg.metric not in eval_metrics:
        raise KeyError(f"registry.metric {reg.metric!r} not in {metrics_path} (have: {sorted(eval_metrics)[:20]})")
    trained = json.loads(model_path.read_text())
    value = eval_metrics[reg.metric]
    hf_dir = Path(trained.get("path") or artifacts.trained_model(cfg))
    info = log_agent_model(cfg, hf_dir, model_corpus(cfg))
    if tracker.run_id is not None:  # every metric on the register run and the logged model, none on the version
        mlflow.log_metrics({metric_key(k): v for k, v in eval_metrics.items()}, run_id=tracker.run_id, model_id=info.model_id)

    client = mlflow.MlflowClient()
    try:
        client.get_registered_model(reg.model_name)
        first = False
    except MlflowException:
        first = True  # register_model creates it (creating it here first made MLflow say it "already exists")
    try:
        champion = client.get_model_version_by_alias(reg.model_name, reg.alias)
        champion_value = float(champion.tags[reg.metric]) if reg.metric in champion.tags else None
        champion_version = str(champion.version)
    except MlflowException:
        champion, champion_value, champion_version = None, None, None

    promoted, reason = decide(reg.metric, value, champion_value, reg.min_improvement)
    if champion is not None and champion_value is None:
        promoted, reason = True, f"champion v{champion_version} has no {reg.metric} tag; {reason}"
    eval_run = _eval_run(client, cfg, reg.metric, value, trained.get("run_id"))
    compared = f"v{champion_version} {reg.metric}={champion_value:.6g}" if champion_value is not None else "no champion"
    evidence = {reg.metric: f"{value:.6g}", f"{EVIDENCE}.compared_to": compared, f"{EVIDENCE}.decision": reason,
                f"{EVIDENCE}.eval_run": run_link(cfg, eval_run) if eval_run else "not found"}  # fmt: skip
    mv = mlflow.register_model(info.model_uri, reg.model_name, tags=evidence | _lineage(cfg))
    if first:
        client.update_registered_model(reg.model_name, description="agentr1 search agent (Agent-R1 end-to-end RL)")
    link = f"[evaluation run]({evidence[f'{EVIDENCE}.eval_run']})" if eval_run else "evaluation run not found"
    about = about_model(cfg, hf_dir)  # the model, its world, its training data
    client.update_model_version(reg.model_name, mv.version,
                                f"{about}.\n\n{reason}. {link}; all metrics on that run and on this logged model.")  # fmt: skip
    if promoted:  # recorded like a manual promotion, so `agentr1 rollback` can undo it
        move_champion(client, cfg, str(mv.version), "register", reason)

    decision = Decision(reg.model_name, str(mv.version), reg.metric, value, champion_version, champion_value, promoted, reason)
    write_json(artifacts.decision(cfg), asdict(decision))
    tracker.log_dict(asdict(decision), "register/decision.json")
    tracker.set_tags({"registered_version": str(mv.version), "promoted": str(promoted), "decision": reason})
    champion_now = mv.version if promoted else champion_version
    return {"registered_version": float(mv.version), "promoted": float(promoted),
            "champion_version": float(champion_now) if champion_now is not None else 0.0, reg.metric: value}  # fmt: skip
