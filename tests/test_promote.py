"""Promotion by hand and rollback on a real MLflow sqlite registry."""

import json

import mlflow
import pytest
from typer.testing import CliRunner

from components.cli import app
from components.config import parse_config
from components.registry.promote import HISTORY_TAG, PromotionError, promote, rollback

NAME = "agentr1-search-agent"


@pytest.fixture
def registry(mlflow_uri, tmp_path):
    """Three versions: v1 champion (em 0.5), v2 evaluated (em 0.7), v3 without metrics."""
    client = mlflow.MlflowClient()
    client.create_registered_model(NAME)
    for em in (0.5, 0.7, None):
        src = tmp_path / f"model-{em}"
        src.mkdir()
        tags = {"em/synthetic/dev": str(em)} if em is not None else {}
        client.create_model_version(NAME, str(src), tags=tags)
    client.set_registered_model_alias(NAME, "champion", "1")
    (tmp_path / "params.yaml").write_text(f"project:\n  artifacts_dir: {tmp_path / 'artifacts'}\n")
    return client


def _champion(client) -> str:
    return str(client.get_model_version_by_alias(NAME, "champion").version)


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def test_promote_moves_alias_and_records_the_move(registry):
    out = _cli("promote", "--version", "2", "--reason", "better on dev")
    assert out.exit_code == 0, out.output
    assert _champion(registry) == "2"
    tags = registry.get_model_version(NAME, "2").tags
    assert tags["champion.action"] == "promote"
    assert tags["champion.reason"] == "better on dev"
    assert tags["champion.old_version"] == "1" and tags["champion.new_version"] == "2"
    assert tags["champion.by"] and tags["champion.at"].endswith("+00:00")
    assert json.loads(registry.get_registered_model(NAME).tags[HISTORY_TAG]) == ["1"]


def test_promote_refuses_a_version_without_metrics(registry):
    out = _cli("promote", "--version", "3", "--reason", "trust me")
    assert out.exit_code == 1
    assert "v3 has no evaluation metrics" in out.output and "Traceback" not in out.output
    assert _champion(registry) == "1"
    assert "champion.action" not in registry.get_model_version(NAME, "3").tags


def test_promote_refuses_unknown_version_and_unregistered_model(registry, tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "a")}})
    with pytest.raises(PromotionError, match="no version 9"):
        promote(cfg, 9, "x")
    with pytest.raises(PromotionError, match="v1 is already 'champion'"):
        promote(cfg, 1, "x")
    with pytest.raises(PromotionError, match="--reason is empty"):
        promote(cfg, 2, "  ")
    assert _champion(registry) == "1" and HISTORY_TAG not in registry.get_registered_model(NAME).tags
    other = parse_config({"project": {"artifacts_dir": str(tmp_path / "a")}, "registry": {"model_name": "nope"}})
    with pytest.raises(PromotionError, match="no registered model 'nope'"):
        promote(other, 1, "x")


def test_rollback_steps_back_once_per_call(registry, tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "a")}})
    registry.set_model_version_tag(NAME, "3", "em/synthetic/dev", "0.9")
    promote(cfg, 2, "first", user="alice")
    promote(cfg, 3, "second", user="bob")
    assert _champion(registry) == "3"
    out = _cli("rollback", "--reason", "v3 regressed in prod")
    assert out.exit_code == 0, out.output
    assert _champion(registry) == "2"
    tags = registry.get_model_version(NAME, "2").tags
    assert tags["champion.action"] == "rollback" and tags["champion.old_version"] == "3"
    assert tags["champion.reason"] == "v3 regressed in prod"
    move = rollback(cfg, user="carol")
    assert (move.old_version, move.new_version, move.by) == ("2", "1", "carol")
    assert _champion(registry) == "1"
    assert registry.get_model_version(NAME, "1").tags["champion.by"] == "carol"
    out = _cli("rollback")
    assert out.exit_code == 1 and "no previous 'champion'" in out.output
    assert _champion(registry) == "1"


def test_rollback_without_history(registry):
    out = _cli("rollback")
    assert out.exit_code == 1 and "no previous 'champion' to roll back to" in out.output
    assert _champion(registry) == "1"


def test_rollback_undoes_the_register_stage_promotion(mlflow_uri, tmp_path):
    from components.registry import register
    from components.tracking.runs import stage_run
    from tests.tiny_hf import train_and_eval

    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}})
    client = mlflow.MlflowClient()
    for em in (0.5, 0.9):
        train_and_eval(cfg, tmp_path, em)
        with stage_run(cfg, "register") as tracker:
            register.run(cfg, tracker)
    assert _champion(client) == "2"
    tags = client.get_model_version(NAME, "2").tags
    assert tags["champion.action"] == "register" and tags["champion.old_version"] == "1"
    assert "beats champion" in tags["champion.reason"]
    assert rollback(cfg).new_version == "1" and _champion(client) == "1"
