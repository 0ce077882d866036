"""Connecting to Elasticsearch: URL and credentials, timeouts, bounded retries with backoff, health check.

The URL comes from `ES_URL` (environment) or the config; credentials come from the environment only
(`ES_API_KEY`, or `ES_USERNAME` + `ES_PASSWORD`) and are never logged, tracked or put in error messages.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError, Elasticsearch

from components.config import ElasticsearchConfig
from components.retrieval.base import SearchError

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class TransientError(Exception):
    """A response that ES says to retry (e.g. one _msearch item rejected with 429 while the others succeeded)."""


def resolve_url(cfg: ElasticsearchConfig, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return (env.get("ES_URL") or cfg.url).rstrip("/")


def redact(url: str) -> str:
    """The URL without user:password, for messages and logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def make_client(cfg: ElasticsearchConfig, url: str, env: Mapping[str, str] | None = None) -> Elasticsearch:
    """A client with a request timeout and no transport-level retries (`call` retries with backoff instead)."""
    env = os.environ if env is None else env
    auth: dict[str, object] = {}
    if env.get("ES_API_KEY"):
        auth["api_key"] = env["ES_API_KEY"]
    elif env.get("ES_USERNAME"):
        auth["basic_auth"] = (env["ES_USERNAME"], env.get("ES_PASSWORD", ""))
    return Elasticsearch(url, request_timeout=cfg.request_timeout_s, max_retries=0, retry_on_timeout=False, **auth)


def describe(err: BaseException) -> str:
    """A short cause without credentials: the error class and ES's reason."""
    if isinstance(err, ApiError):
        info = err.info if isinstance(err.info, dict) else {}
        reason = (info.get("error") or {}) if isinstance(info.get("error"), dict) else {}
        text = reason.get("reason") or reason.get("type") or err.message
        return f"HTTP {err.meta.status}: {text}"
    return f"{type(err).__name__}: {err}"


def retryable(err: BaseException) -> bool:
    if isinstance(err, (TransportConnectionError, ConnectionTimeout, TransientError)):
        return True
    if isinstance(err, ApiError):
        return err.meta.status in RETRY_STATUSES
    return False


def call(
    fn: Callable[[], T],
    *,
    what: str,
    url: str,
    max_retries: int,
    backoff_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `fn`; on a transient failure retry at most `max_retries` times, sleeping backoff_s, 2x, 4x ...

    Raises SearchError naming the URL and the cause once retries are spent, or at once for a permanent error.
    """
    for attempt in range(max_retries + 1):
        try:
            return fn()
        except (TransportError, ApiError, TransientError) as err:
            if not retryable(err) or attempt == max_retries:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise SearchError(f"Elasticsearch at {redact(url)}: {what} failed{tries}: {describe(err)}") from err
            delay = backoff_s * (2**attempt)
            log.warning("Elasticsearch %s: %s failed (%s); retry %d/%d in %.2fs",
                        redact(url), what, describe(err), attempt + 1, max_retries, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def check_health(client: Elasticsearch, url: str, timeout_s: float = 5.0) -> str:
    """The cluster's health status ('green' or 'yellow'); SearchError naming the URL and cause otherwise."""
    try:
        health = client.options(request_timeout=timeout_s).cluster.health()
    except (TransportError, ApiError) as err:
        raise SearchError(f"Elasticsearch at {redact(url)} is not healthy: {describe(err)}") from err
    status = health.get("status")
    if status not in ("green", "yellow"):
        raise SearchError(f"Elasticsearch at {redact(url)} is not healthy: cluster status {status!r}")
    return status
