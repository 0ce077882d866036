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
