"""The index layout (settings, mapping) and the search request for one query."""

from __future__ import annotations

import re
from typing import Any

from components.config import ElasticsearchConfig

# C0/C1 control characters (tab and newline stay: they are just whitespace to the analyzer).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def index_body(cfg: ElasticsearchConfig, corpus_hash: str, dims: int | None = None) -> dict[str, Any]:
    """Settings for a bulk load (refresh off, 0 replicas, 1 shard) and a strict mapping.

    Refresh stays off after the load: a version never changes once built, and the build refreshes it once.
    `_meta.complete` is False until the load has been refreshed and counted; only complete indices go live.
    """
    analyzed = {"type": "text", "analyzer": cfg.analyzer}
    # `contents` = title + text as one BM25 field (what the embedded backend scores); `title` alone carries the boost.
    properties: dict[str, Any] = {
        "title": {**analyzed, "copy_to": "contents"},
        "text": {"type": "text", "index": False, "copy_to": "contents"},
        "contents": analyzed,
        "corpus": {"type": "keyword"},
    }
    if dims:
        properties["embedding"] = {"type": "dense_vector", "dims": dims, "index": True, "similarity": "cosine"}
    return {
        "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"}},
        "mappings": {
            "dynamic": "strict",
            "_meta": {"corpus_hash": corpus_hash, "complete": False},
            "properties": properties,
        },
    }


def clean_query(query: str, max_chars: int) -> str:
    """Literal query text: no control characters, no lone surrogates, at most max_chars."""
    query = query.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL.sub(" ", query)[:max_chars]


def search_body(cfg: ElasticsearchConfig, query: str, k: int, vector: list[float] | None = None) -> dict[str, Any]:
    """BM25 over title + text (`contents`), plus the title alone weighted by title_boost (0: off).

    The query is analysed as words, never parsed as query syntax.

    With a vector, the request is hybrid: ES adds the kNN score (weighted by knn_boost) to the BM25 score.
    """
    body: dict[str, Any] = {
        "size": k,
        "query": (
            {"multi_match": {"query": query, "fields": ["contents", f"title^{cfg.title_boost:g}"], "type": "most_fields"}}
            if cfg.title_boost > 0
            else {"match": {"contents": {"query": query}}}
        ),
        "_source": ["title", "text"],
    }
    if vector is not None:
        body["knn"] = {
            "field": "embedding",
            "query_vector": vector,
            "k": k,
            "num_candidates": max(50, 4 * k),
            "boost": cfg.knn_boost,
        }
    return body
