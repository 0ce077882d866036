"""The champion gate on a real MLflow sqlite registry: a version becomes champion only when it beats the champion,
the base agent and naive RAG on the gate metric."""

import json

import mlflow
import pytest

from components.config import parse_config
from components.registry import register
from components.registry.gate import judge
from components.registry.promote import current_champion, rollback
from components.tracking.runs import stage_run
from tests.tiny_hf import train_and_eval

NAME = "agentr1-search-agent"


@pytest.fixture
def cfg(mlflow_uri, tmp_path):
    return parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}})


def _register(cfg, tmp_path, em: float, **baselines: float) -> dict:
    train_and_eval(cfg, tmp_path, em, baselines)
    with stage_run(cfg, "register") as tracker:
        register.run(cfg, tracker)
    return json.loads((cfg.artifacts / "register" / "decision.json").read_text())


def test_first_version_below_the_base_agent_is_not_champion(cfg, tmp_path):
    """The run that scored EM 0.07 against base agent 0.12 and naive RAG 0.25: no champion yet is no free pass."""
    decision = _register(cfg, tmp_path, 0.07, base_agent=0.12, naive_rag=0.25)
    client = mlflow.MlflowClient()
    assert decision["promoted"] is False and current_champion(client, NAME, "champion") is None
    tags = client.get_model_version(NAME, "1").tags
    assert tags["gate.vs_champion"] == "0.07 vs none: no champion"
    assert tags["gate.vs_base_agent"] == "0.07 vs 0.12: does not beat"
    assert tags["gate.vs_naive_rag"] == "0.07 vs 0.25: does not beat"
    assert tags["evidence.decision"] == decision["reason"] == (
        "em/synthetic/dev=0.0700; no champion yet; does not beat base_agent 0.1200; does not beat naive_rag 0.2500")
    assert decision["gate"] == {k: v for k, v in tags.items() if k.startswith("gate.")}
    assert not any(k.startswith("champion.") for k in tags)  # no move recorded


def test_a_version_that_beats_the_champion_and_base_agent_but_not_naive_rag_is_refused(cfg, tmp_path):
    client = mlflow.MlflowClient()
    assert _register(cfg, tmp_path, 0.3, base_agent=0.1, naive_rag=0.2)["promoted"]
    decision = _register(cfg, tmp_path, 0.5, base_agent=0.1, naive_rag=0.6)
    assert decision["promoted"] is False and current_champion(client, NAME, "champion") == "1"
    assert "beats champion 0.3000 (v1, +0.2000); beats base_agent 0.1000; does not beat naive_rag 0.6000" in decision["reason"]
    tags = client.get_model_version(NAME, "2").tags
    assert tags["gate.vs_champion"] == "0.5 vs 0.3 (v1): beats"
    assert tags["gate.vs_naive_rag"] == "0.5 vs 0.6: does not beat"


def test_a_version_above_the_champion_and_both_baselines_is_promoted(cfg, tmp_path):
    client = mlflow.MlflowClient()
    _register(cfg, tmp_path, 0.3, base_agent=0.1, naive_rag=0.2)
    decision = _register(cfg, tmp_path, 0.5, base_agent=0.1, naive_rag=0.2)
    assert decision["promoted"] and current_champion(client, NAME, "champion") == "2"
    tags = client.get_model_version(NAME, "2").tags
    assert tags["gate.vs_champion"] == "0.5 vs 0.3 (v1): beats"
    assert tags["gate.vs_base_agent"] == "0.5 vs 0.1: beats" and tags["gate.vs_naive_rag"] == "0.5 vs 0.2: beats"
    assert tags["champion.action"] == "register" and tags["champion.reason"] == tags["evidence.decision"]
    assert rollback(cfg).new_version == "1"  # a gated promotion is undone like any other


def test_a_baseline_the_evaluation_lacks_does_not_block_and_is_recorded(cfg, tmp_path):
    decision = _register(cfg, tmp_path, 0.3, base_agent=0.1)  # a profile that does not evaluate naive RAG
    assert decision["promoted"]
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags
    assert tags["gate.vs_naive_rag"] == "0.3 vs none: not evaluated"
    assert "naive_rag not evaluated on em/synthetic/dev (does not block)" in tags["evidence.decision"]


def test_the_rule():
    reg = parse_config({"registry": {"min_improvement": 0.1}}).registry
    metrics = {"em/synthetic/dev": 0.65, "baseline/base_agent/em/synthetic/dev": 0.2, "baseline/naive_rag/em/synthetic/dev": 0.3}
    assert judge(reg, metrics, None, None).promoted
    assert judge(reg, metrics, "1", 0.5).promoted  # the champion by more than min_improvement
    assert not judge(reg, metrics | {"em/synthetic/dev": 0.55}, "1", 0.5).promoted
    assert judge(reg, metrics, "1", None).promoted  # a champion without the metric's tag does not block
    assert not judge(reg, metrics | {"baseline/naive_rag/em/synthetic/dev": 0.65}, None, None).promoted  # a tie loses
    assert judge(reg, metrics | {"baseline/naive_rag/em/synthetic/dev": 0.64}, None, None).promoted  # no margin on baselines
    assert judge(reg, metrics | {"baseline/direct/em/synthetic/dev": 0.9}, None, None).promoted  # direct: not gated
    only_base = parse_config({"registry": {"baselines": ["base_agent"]}}).registry
    assert judge(only_base, metrics | {"baseline/naive_rag/em/synthetic/dev": 0.9}, None, None).promoted
