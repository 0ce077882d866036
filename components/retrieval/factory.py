"""Pick the SearchBackend named by `retrieval.backend`: embedded BM25 by default, Elasticsearch in production."""

from __future__ import annotations

from components import artifacts
from components.config import Config
from components.retrieval.base import SearchBackend


def make_backend(cfg: Config) -> SearchBackend:
    if cfg.retrieval.backend == "embedded":
        from components.retrieval.embedded import EmbeddedBackend

        return EmbeddedBackend(artifacts.index(cfg), cfg.retrieval.embedded, seed=cfg.project.seed)
    if cfg.retrieval.backend == "elasticsearch":
        from components.retrieval.elasticsearch import ElasticsearchBackend  # needs the server only when chosen

        return ElasticsearchBackend(cfg.retrieval.elasticsearch)
    raise ValueError(f"retrieval.backend: unknown backend {cfg.retrieval.backend!r}")
