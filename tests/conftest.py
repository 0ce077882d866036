"""Shared fixtures. Tool state goes to temp dirs; telemetry is off."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.env import apply_defaults

ROOT = Path(__file__).resolve().parents[1]
apply_defaults(ROOT)

_es_fixtures = ROOT / "tests" / "es_fixtures.py"
pytest_plugins = (["tests.es_fixtures"] if _es_fixtures.exists() else []) + ["tests.browser", "tests.verl_fixtures", "tests.evaluated_project"]


@pytest.fixture
def mlflow_uri(tmp_path, monkeypatch) -> str:
    """A fresh real MLflow sqlite store for one test."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(uri)
    yield uri
    while mlflow.active_run() is not None:
        mlflow.end_run()


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def pytest_report_header(config):
    return f"agentr1 root: {ROOT}; ES_URL={os.environ.get('ES_URL', '<unset>')}"
