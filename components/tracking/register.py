"""The `register` stage: a new model version in the MLflow Model Registry; the champion alias moves only on a win."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from components import artifacts
from components.config import Config
from components.evaluation.report import flatten
from components.io import write_json
from components.tracking.promote import move_champion
from components.tracking.tracker import NullTracker, file_digest


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


def run(cfg: Config, tracker: NullTracker) -> dict[str, float]:
    import mlflow
    from mlflow.exceptions import MlflowException

    reg = cfg.registry
    metrics_path = artifacts.require(cfg, artifacts.eval_metrics(cfg))
    model_path = artifacts.require(cfg, artifacts.train_model_json(cfg))
    eval_metrics = flatten(json.loads(metrics_path.read_text()))
    if reg.metric not in eval_metrics:
        raise KeyError(f"registry.metric {reg.metric!r} not in {metrics_path} (have: {sorted(eval_metrics)[:20]})")
    model_uri = json.loads(model_path.read_text())["model_uri"]
    value = eval_metrics[reg.metric]

    client = mlflow.MlflowClient()
    try:
        client.get_registered_model(reg.model_name)
    except MlflowException:
        client.create_registered_model(reg.model_name, description="agentr1 search agent (Agent-R1 end-to-end RL)")
    try:
        champion = client.get_model_version_by_alias(reg.model_name, reg.alias)
        champion_value = float(champion.tags[reg.metric]) if reg.metric in champion.tags else None
        champion_version = str(champion.version)
    except MlflowException:
        champion, champion_value, champion_version = None, None, None

    tags = {k: f"{v:.6g}" for k, v in eval_metrics.items()} | _lineage(cfg)
    mv = mlflow.register_model(model_uri, reg.model_name, tags=tags)
    promoted, reason = decide(reg.metric, value, champion_value, reg.min_improvement)
    if champion is not None and champion_value is None:
        promoted, reason = True, f"champion v{champion_version} has no {reg.metric} tag; {reason}"
    if promoted:  # recorded like a manual promotion, so `agentr1 rollback` can undo it
        move_champion(client, cfg, str(mv.version), "register", reason)
    client.set_model_version_tag(reg.model_name, mv.version, "champion_decision", reason)

    decision = Decision(reg.model_name, str(mv.version), reg.metric, value, champion_version, champion_value, promoted, reason)
    write_json(artifacts.decision(cfg), asdict(decision))
    tracker.log_dict(asdict(decision), "register/decision.json")
    tracker.set_tags({"registered_version": str(mv.version), "promoted": str(promoted), "decision": reason})
    return {"registered_version": float(mv.version), "promoted": float(promoted), reg.metric: value}
