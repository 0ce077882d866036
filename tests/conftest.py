"""Shared fixtures. Tool state goes to temp dirs; telemetry is off."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from components.env import apply_defaults

ROOT = Path(__file__).resolve().parents[1]
START_CWD = Path.cwd()  # the session's working directory: a fixture that changes it restores it before its tests run


apply_defaults(ROOT)
# Two xdist workers, one per core: a test and the processes it starts use one torch thread. (Two threads on a core
# the other worker is using run a small model's evaluate 2x slower, spinning; docs/testing.md.)
os.environ.setdefault("OMP_NUM_THREADS", "1")
gc.disable()  # collection imports the whole stack; collecting meanwhile frees nothing (on again below)

_es_fixtures = ROOT / "tests" / "es_fixtures.py"
pytest_plugins = (["tests.es_fixtures"] if _es_fixtures.exists() else []) + [
    "tests.browser", "tests.verl_fixtures", "tests.evaluated_project", "tests.built_project", "tests.real_conversion",
    "tests.timeline"]


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


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):  # after collection, in xdist workers and the controller alike
    gc.freeze()  # the imported stack lives as long as the process: later collections skip it
    gc.enable()


def pytest_unconfigure(config):
    gc.freeze()  # each worker exits without the collector walking torch's, transformers' and verl's objects


def pytest_report_header(config):
    return f"agentr1 root: {ROOT}; ES_URL={os.environ.get('ES_URL', '<unset>')}"


# `make test` runs the suite on 2 pytest-xdist workers. A group runs on one worker, groups in the order below:
# - every Elasticsearch test (the fault tests stop and restart the one local server);
# - the tests of one shared session fixture (built once, not once per worker);
# - otherwise the tests of one module (module fixtures are built once).
# (xdist's own --dist loadgroup marks do not work with pytest 9: it renames nodes through an attribute pytest 9
# no longer reads. So the controller groups node ids itself, and each worker checks the grouping at collection.)
# (`built` is shared by the workers through a lock, tests/built_project.py: its modules spread over both.)
SHARED_FILES = {"tests/test_eval_report.py": "evaluated", "tests/test_progress.py": "evaluated"}
ES_FIXTURES = {"es_url", "es_local", "es_backend"}
# Modules that run the pipeline's processes, a server, vLLM or a browser: marked `e2e`, left out of `make test-fast`
# (with the `slow` and `es` tests) and run by `make test`.
E2E_FILES = {f"tests/test_{name}.py" for name in (
    "flows", "e2e_dvc", "dvc_deps", "concurrent_runs", "mlflow_ui", "serve", "ask", "readme_ask", "progress",
    "eval_report", "vllm_engine", "real_model", "learning")}  # fmt: skip
# Each group's seconds in a whole `make test` (EPYC Zen 4, 2 workers): the controller hands out the longest groups
# first, so no long group starts last. Only the order matters; a group not listed counts as 0.
GROUP_SECONDS = {"tests/test_flows.py": 397, "tests/test_learning.py": 333, "tests/test_vllm_engine.py": 131,
                 "elasticsearch": 115, "tests/test_rl_train.py": 109, "tests/test_e2e_dvc.py": 90, "evaluated": 78,
                 "tests/test_real_model.py": 75, "tests/test_dvc_deps.py": 55, "tests/test_serve.py": 53,
                 "tests/test_concurrent_runs.py": 47, "tests/test_tracking.py": 35, "tests/test_mlflow_ui.py": 32,
                 "tests/test_validation.py": 24, "tests/test_ask.py": 24, "tests/test_warmup.py": 23,
                 "tests/test_verl_agent_loop.py": 17, "tests/test_gate.py": 15, "tests/test_verl_launch.py": 14,
                 "tests/test_model_source.py": 14, "tests/test_engine_reference.py": 13, "tests/test_readme_ask.py": 12,
                 "tests/test_promote.py": 11, "tests/test_verl_tracking.py": 10, "tests/test_cold_start.py": 8,
                 "tests/test_verl_dataset.py": 6, "tests/test_disk_full.py": 6}  # fmt: skip


def xdist_group(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path.startswith("tests/test_es_") or nodeid.endswith("[elasticsearch]"):
        return "elasticsearch"
    return SHARED_FILES.get(path, path)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("::")[0] in E2E_FILES:
            item.add_marker(pytest.mark.e2e)
        uses = set(getattr(item, "fixturenames", ()))
        shared = sorted(set(SHARED_FILES.values()) & uses)  # a shared session fixture is named after its group
        want = "elasticsearch" if uses & ES_FIXTURES else shared[0] if shared else None
        if want and xdist_group(item.nodeid) != want:
            raise pytest.UsageError(f"{item.nodeid} uses the {want} fixtures: add it to tests/conftest.py's groups")
    items.sort(key=lambda item: -GROUP_SECONDS.get(xdist_group(item.nodeid), 0))  # stable: file order otherwise


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return Grouped(config, log)
