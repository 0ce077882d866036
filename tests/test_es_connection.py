"""Connection settings, credentials and the bounded retry loop (faults injected: they cannot be made on demand)."""

from __future__ import annotations

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elastic_transport import ConnectionError as TransportConnectionError
from elasticsearch import ApiError

from components.config import ElasticsearchConfig
from components.retrieval.base import SearchError
from components.retrieval.elasticsearch import ElasticsearchBackend
from components.retrieval.es_connection import TransientError, call, make_client, redact, resolve_url


def api_error(status: int, reason: str) -> ApiError:
    meta = ApiResponseMeta(status, "1.1", HttpHeaders(), 0.01, NodeConfig("http", "127.0.0.1", 9200))
    return ApiError(reason, meta, {"error": {"type": "x", "reason": reason}})


def flaky(failures: list[BaseException], value: str = "ok"):
    def fn() -> str:
        if failures:
            raise failures.pop(0)
        return value
    return fn


def test_transient_failures_are_retried_with_doubling_backoff() -> None:
    sleeps: list[float] = []
    fn = flaky([TransportConnectionError("refused"), api_error(429, "rejected"), TransientError("1 of 64 busy")])
    assert call(fn, what="x", url="http://h:1", max_retries=3, backoff_s=0.5, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0, 2.0]


def test_retries_are_bounded_and_the_error_names_url_attempts_and_cause() -> None:
    sleeps: list[float] = []
    fn = flaky([TransportConnectionError("refused")] * 10)
    with pytest.raises(SearchError, match=r"^Elasticsearch at http://h:1: _msearch failed after 3 attempts: "
                                          r"ConnectionError"):
        call(fn, what="_msearch", url="http://h:1", max_retries=2, backoff_s=0.1, sleep=sleeps.append)
    assert sleeps == [0.1, 0.2]


def test_permanent_errors_are_not_retried() -> None:
    sleeps: list[float] = []
    fn = flaky([api_error(400, "failed to parse query")])
    with pytest.raises(SearchError, match=r"http://h:1: search failed: HTTP 400: failed to parse query"):
        call(fn, what="search", url="http://h:1", max_retries=3, backoff_s=0.1, sleep=sleeps.append)
    assert sleeps == []


def test_url_from_environment_wins_and_credentials_come_only_from_it() -> None:
    cfg = ElasticsearchConfig(url="http://cfg-host:9200/")
    assert resolve_url(cfg, {}) == "http://cfg-host:9200"
    assert resolve_url(cfg, {"ES_URL": "https://prod:9243/"}) == "https://prod:9243"
    client = make_client(cfg, "http://cfg-host:9200", {"ES_API_KEY": "c2VjcmV0"})
    assert client._headers["authorization"] == "ApiKey c2VjcmV0"
    client = make_client(cfg, "http://cfg-host:9200", {"ES_USERNAME": "elastic", "ES_PASSWORD": "pw"})
    assert client._headers["authorization"].startswith("Basic ")
    assert "authorization" not in make_client(cfg, "http://cfg-host:9200", {})._headers
    assert "api_key" not in ElasticsearchConfig.model_fields and "password" not in ElasticsearchConfig.model_fields


def test_errors_never_show_credentials_in_the_url() -> None:
    assert redact("https://elastic:s3cret@prod.example:9243") == "https://prod.example:9243"
    cfg = ElasticsearchConfig(request_timeout_s=2.0, max_retries=0)
    backend = ElasticsearchBackend(cfg, url="http://elastic:s3cret@127.0.0.1:9")
    with pytest.raises(SearchError) as err:
        backend.health()
    assert "http://127.0.0.1:9" in str(err.value) and "s3cret" not in str(err.value)
    backend.close()


@pytest.mark.es
def test_credentials_from_the_environment_are_never_tracked_or_printed(es_url, tmp_path, repo_root) -> None:
    """The index stage on the real server with ES_USERNAME/ES_PASSWORD set: the MLflow store, its artifacts,
    the outputs and what the CLI printed hold neither the password nor the user."""
    import os
    import subprocess
    import sys

    import uuid

    import yaml

    prefix = f"agentr1-leak-{uuid.uuid4().hex[:8]}-"
    raw = {"project": {"artifacts_dir": str(tmp_path / "art")},
           "data": {"datasets": [], "synthetic": {"n_entities": 20, "n_relations": 2, "n_train": 10, "n_dev": 5,
                                                  "n_test": 5}},
           "retrieval": {"backend": "elasticsearch", "elasticsearch": {"index_prefix": prefix}}}  # fmt: skip
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "ES_URL": es_url, "ES_USERNAME": "leakuser7", "ES_PASSWORD": "hunter2-leak",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(repo_root)}  # fmt: skip
    printed = ""
    for stage in ("prepare", "index"):
        done = subprocess.run([sys.executable, "-m", "components.cli", stage, "-p", str(params)], env=env,
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
        printed += done.stdout + done.stderr
        assert done.returncode == 0, done.stderr[-2000:]
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "params.yaml"]
    assert any(p.name == "mlflow.db" for p in stored) and (tmp_path / "art" / "index" / "manifest.json").is_file()
    for secret in ("hunter2-leak", "leakuser7"):
        assert secret not in printed
        assert not [p for p in stored if secret.encode() in p.read_bytes()]
    from elasticsearch import Elasticsearch

    client = Elasticsearch(es_url)
    for name in client.indices.get(index=f"{prefix}*").body:
        client.indices.delete(index=name)
    client.close()


def test_a_failed_search_shows_the_model_no_backend_internals(monkeypatch, caplog) -> None:
    """The real client against a port nothing listens on: the model reads a fixed error, never the URL, the
    client's error text or its class; the operator's log has the whole (redacted) cause."""
    import logging
    import socket

    from components.agent.tools import SearchTool

    with socket.socket() as s:  # a port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ES_URL", f"http://elastic:hunter2@127.0.0.1:{port}")
    backend = ElasticsearchBackend(ElasticsearchConfig(max_retries=0, request_timeout_s=2.0))
    with caplog.at_level(logging.WARNING, logger="components.agent.tools"):
        results = SearchTool(backend, "wiki", 3).execute([{"query": "x"}, {"query": "y"}])
    backend.close()
    assert [(r.text, r.success) for r in results] == [("Error: search failed: the search service is unavailable", False)] * 2
    logged = caplog.text
    assert f"127.0.0.1:{port}" in logged and "ConnectionError" in logged and "hunter2" not in logged
