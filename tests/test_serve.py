"""`mlflow models serve` of the registered agent: a real server on a free port, real HTTP requests to /invocations."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import pytest

from components.serving.ask import ask
from components.serving.pyfunc import log_agent_model
from tests.served import NAME, PRIMED, dev_question, free_port, index_world, primed_cfg, start, stop, wait_up

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture
def champion(mlflow_uri, tmp_path):
    """The primed tiny agent registered as the pyfunc agent model under `champion`, its world indexed."""
    cfg = primed_cfg(tmp_path)
    index_world(cfg)
    with mlflow.start_run():
        info = log_agent_model(cfg, PRIMED, "synthetic")
    client = mlflow.MlflowClient()
    client.create_registered_model(NAME)
    mv = mlflow.register_model(info.model_uri, NAME, tags={cfg.registry.metric: "0.5"})
    client.set_registered_model_alias(NAME, "champion", mv.version)
    (tmp_path / "params.yaml").write_text(json.dumps(cfg.model_dump(mode="json")))
    return cfg, mlflow_uri


def test_mlflow_models_serve_answers_with_trajectory_and_rejects_bad_input(champion, tmp_path):
    cfg, uri = champion
    question = dev_question(cfg)
    expected = ask(cfg, question)  # the same agent code, in-process: the server must say the same
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    log = tmp_path / "serve.log"
    cwd = tmp_path / "elsewhere"  # the served model finds its index by the absolute path it carries
    cwd.mkdir()
    proc = start(["mlflow", "models", "serve", "-m", f"models:/{NAME}@champion", "--env-manager", "local",
                  "--host", "127.0.0.1", "-p", str(port), "-w", "1"], cwd, env, log)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_up(f"{base}/ping", proc, log)
        status, body = post(f"{base}/invocations", json.dumps({"inputs": {"question": [question]}}).encode())
        assert status == 200, body
        (pred,) = body["predictions"]
        assert pred["question"] == question and pred["corpus"] == "synthetic"
        assert pred["answer"] == expected.answer
        assert [t["text"] for t in pred["turns"]] == [t.text for t in expected.turns]
        calls = [t for t in pred["turns"] if t["call"] is not None]
        assert calls and pred["searches"] == len(calls)  # the primed agent searches before it answers
        for t in calls:
            assert t["call"]["name"] == "search" and t["call"]["arguments"]["query"] and t["observation"]
        assert [t["observation"] for t in pred["turns"]] == [t.observation for t in expected.turns]

        # two questions in the pandas split form
        records = {"dataframe_split": {"columns": ["question"], "data": [[question], ["Who is the rival of nobody?"]]}}
        status, body = post(f"{base}/invocations", json.dumps(records).encode())
        assert status == 200 and len(body["predictions"]) == 2 and body["predictions"][0]["answer"] == expected.answer

        for bad, says in [({"inputs": {"query": ["x"]}}, "question"),  # wrong field
                          ({"inputs": {"question": ["  "]}}, "question 0: expected a non-empty string"),
                          ({"nothing": 1}, "")]:  # fmt: skip
            status, body = post(f"{base}/invocations", json.dumps(bad).encode())
            assert 400 <= status < 500, (bad, status, body)
            assert body["error_code"] in {"BAD_REQUEST", "INVALID_PARAMETER_VALUE"} and says in body["message"], body
        status, body = post(f"{base}/invocations", b"{not json")
        assert 400 <= status < 500 and body["error_code"] == "BAD_REQUEST"
        assert proc.poll() is None  # bad requests never take the server down
        status, body = post(f"{base}/invocations", json.dumps({"inputs": {"question": [question]}}).encode())
        assert status == 200 and body["predictions"][0]["answer"] == expected.answer
    finally:
        stop(proc)
