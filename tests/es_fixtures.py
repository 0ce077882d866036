"""Fixtures for tests against a real Elasticsearch (imported by tests/conftest.py).

es_url           the server: ES_URL if set, else the local one that `scripts/es.sh start` provisions and starts
es_local         the local script-managed server, for fault tests that stop and restart it (skips for ES_URL
                 pointing at a server the script does not manage)
es_cfg           an ElasticsearchConfig with a unique index prefix and short timeouts
es_backend       an ElasticsearchBackend on es_url; deletes its test indices afterwards
hotpotqa_sample  (questions, passages) of the shipped HotpotQA sample (300 questions, 2,964 passages)
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from components.config import DatasetSpec, ElasticsearchConfig
from components.data.loaders.hotpotqa import load_ircot
from components.data.passages import PassageTable
from components.retrieval.elasticsearch import ElasticsearchBackend

REPO = Path(__file__).resolve().parents[1]
ES_SCRIPT = REPO / "scripts" / "es.sh"
HOTPOTQA = REPO / "data" / "hotpotqa" / "dev_distractor_ircot_300.jsonl"


def es_script(command: str, timeout: float = 600) -> str:
    """Run `scripts/es.sh <command>`; its stdout (the URL for start/status). Fails the test on a non-zero exit."""
    done = subprocess.run([str(ES_SCRIPT), command], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/es.sh {command} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


@pytest.fixture(scope="session")
def es_url() -> str:
    url = os.environ.get("ES_URL")
    if url:
        return url.rstrip("/")
    return es_script("start").splitlines()[-1]


@pytest.fixture(scope="session")
def es_local(es_url: str) -> str:
    local = es_script("url")
    if es_url != local:
        pytest.skip(f"ES_URL={es_url} is not the server scripts/es.sh manages ({local}); fault tests need that one")
    es_script("start")
    return es_url


@pytest.fixture
def es_cfg() -> ElasticsearchConfig:
    return ElasticsearchConfig(
        index_prefix=f"agentr1-test-{uuid.uuid4().hex[:8]}-",
        request_timeout_s=10.0,
        max_retries=2,
        retry_backoff_s=0.2,
    )


def drop_indices(backend: ElasticsearchBackend) -> None:
    client = backend.client.options(ignore_status=404, request_timeout=30)
    found = client.indices.get(index=f"{backend.cfg.index_prefix}*", allow_no_indices=True)
    for name in found.body if found.meta.status == 200 else {}:
        client.indices.delete(index=name)


@pytest.fixture
def es_backend(es_url: str, es_cfg: ElasticsearchConfig):
    backend = ElasticsearchBackend(es_cfg, url=es_url)
    yield backend
    try:
        drop_indices(backend)
    finally:
        backend.close()


@pytest.fixture(scope="session")
def hotpotqa_sample():
    spec = DatasetSpec(name="hotpotqa", format="hotpotqa_ircot", path=HOTPOTQA.name)
    table = PassageTable()
    questions = load_ircot(spec, HOTPOTQA, table)
    return questions, table.passages
