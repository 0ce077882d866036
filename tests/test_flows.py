"""Real Prefect flow runs: ephemeral mode, and a scheduled deployment served against a local Prefect server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from tests.project import BIN, env_for, make_project, run

STAGES = "prepare,validate,index,retrieval_eval"


def _mlflow_runs(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    return client.search_runs([exp.experiment_id])


@pytest.mark.slow
def test_flow_runs_stages_nested_and_caches(tmp_path):
    project = make_project(tmp_path / "p", git=False)
    out = run([sys.executable, "-m", "flows.pipeline", "--stages", STAGES], project)
    assert "Finished in state Completed" in out.stdout + out.stderr
    assert (project / "artifacts" / "metrics" / "retrieval.json").exists()
    runs = _mlflow_runs(project)
    parent = [r for r in runs if r.data.tags.get("agentr1.stage") == "pipeline"]
    assert len(parent) == 1
    children = {r.data.tags["agentr1.stage"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id}
    assert set(children) == set(STAGES.split(","))
    assert children["retrieval_eval"].data.metrics["recall_5/hotpotqa"] > 0.3
    assert children["prepare"].data.params["data.synthetic.n_train"] == "100"

    # Same inputs: every task is served from Prefect's cache, no new stage runs.
    out = run([sys.executable, "-m", "flows.pipeline", "--stages", STAGES], project)
    assert (out.stdout + out.stderr).count("Finished in state Cached") == len(STAGES.split(","))
    assert len(_mlflow_runs(project)) == len(runs) + 1  # only the new parent run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(url)


CHECK = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment

async def schedules():
    async with get_client() as c:
        d = await c.read_deployment_by_name("agentr1-pipeline/nightly")
        return [s.schedule.cron for s in d.schedules], d.parameters

crons, parameters = asyncio.run(schedules())
flow_run = run_deployment("agentr1-pipeline/nightly", timeout=600)
print(json.dumps({"crons": crons, "parameters": parameters, "state": flow_run.state.type.value}))
"""


@pytest.mark.slow
def test_scheduled_deployment_runs_on_local_server(tmp_path):
    project = make_project(tmp_path / "p", git=False)
    env = env_for(project)
    port = _free_port()
    env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    served = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/health", 120)
        served = subprocess.Popen(
            [sys.executable, "-m", "flows.deploy", "--stages", "prepare,validate"],
            cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while True:
            out = subprocess.run([sys.executable, "-c", CHECK], cwd=project, env=env, capture_output=True, text=True, timeout=700)
            if out.returncode == 0 or time.monotonic() > deadline or "ObjectNotFound" not in out.stderr:
                break
            time.sleep(2)  # serve() has not registered the deployment yet
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["crons"] == ["0 3 * * *"]
        assert result["parameters"]["stages"] == ["prepare", "validate"]
        assert result["state"] == "COMPLETED"
        assert (project / "artifacts" / "prepared" / "questions.parquet").exists()
    finally:
        for proc in (served, server):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
