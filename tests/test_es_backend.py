"""ElasticsearchBackend against the real server: versions, alias switch, no-op re-index, retention, _msearch."""

from __future__ import annotations

import time

import pytest

from components.config import ElasticsearchConfig
from components.data.schema import Passage
from components.retrieval.base import SearchBackend, SearchError, corpus_hash
from components.retrieval.elasticsearch import ElasticsearchBackend

pytestmark = pytest.mark.es

CORPUS = [
    Passage("p1", "Shirley Temple", "Shirley Temple Black was an American actress and diplomat, Chief of Protocol."),
    Passage("p2", "Kiss and Tell", "Kiss and Tell is a 1945 comedy film starring Shirley Temple as Corliss Archer."),
    Passage("p3", "Janet Waldo", "Janet Waldo was an American radio and voice actress."),
    Passage("p4", "Meet Corliss Archer", "Meet Corliss Archer is a radio program from the Golden Age of radio."),
]


def test_build_then_search_ranks_the_matching_passage_first(es_backend: ElasticsearchBackend) -> None:
    assert isinstance(es_backend, SearchBackend)
    v = es_backend.build("wiki", CORPUS)
    assert v.created and v.n_docs == 4 and v.version == corpus_hash(CORPUS)
    assert v.name == f"{es_backend.cfg.index_prefix}wiki-{v.version[:12]}-{es_backend.layout()}"
    assert es_backend.live_version("wiki") == v.version
    [hits] = es_backend.search("wiki", ["voice actress Janet"], k=2)
    assert hits[0].id == "p3" and hits[0].title == "Janet Waldo" and "radio" in hits[0].text
    assert hits[0].score > (hits[1].score if len(hits) > 1 else 0.0)


def test_rebuilding_an_unchanged_corpus_is_a_no_op(es_backend: ElasticsearchBackend) -> None:
    first = es_backend.build("wiki", CORPUS)
    created_at = es_backend.client.indices.get_settings(index=first.name).body[first.name]["settings"]["index"][
        "creation_date"
    ]
    again = es_backend.build("wiki", list(reversed(CORPUS)))  # same content, other order
    assert not again.created and again.name == first.name
    after = es_backend.client.indices.get_settings(index=first.name).body[first.name]["settings"]["index"]
    assert after["creation_date"] == created_at
    assert es_backend.client.count(index=first.name).body["count"] == len(CORPUS)


def test_new_version_moves_the_alias_and_retention_deletes_old_versions(es_backend: ElasticsearchBackend) -> None:
    names = []
    for i in range(4):  # retention 2: the live one and the newest older one survive
        corpus = CORPUS + [Passage(f"extra{i}", f"Extra {i}", f"version marker number{i}")]
        v = es_backend.build("wiki", corpus)
        assert v.created and es_backend.live_version("wiki") == v.version
        [hits] = es_backend.search("wiki", [f"number{i}"], k=3)
        assert [h.id for h in hits] == [f"extra{i}"]
        names.append(v.name)
        time.sleep(0.01)  # distinct creation dates
    left = set(es_backend.client.indices.get(index=f"{es_backend.cfg.index_prefix}wiki-*").body)
    assert left == set(names[-2:])
    aliased = es_backend.client.indices.get_alias(name=es_backend.alias_name("wiki")).body
    assert list(aliased) == [names[-1]]


def test_another_analyzer_is_a_new_index_for_the_same_corpus(es_url: str, es_backend: ElasticsearchBackend) -> None:
    first = es_backend.build("wiki", CORPUS)
    other = ElasticsearchBackend(es_backend.cfg.model_copy(update={"analyzer": "standard"}), url=es_url)
    second = other.build("wiki", CORPUS)
    assert second.created and second.version == first.version and second.name != first.name
    mapping = other.client.indices.get_mapping(index=second.name).body[second.name]["mappings"]
    assert mapping["properties"]["contents"]["analyzer"] == "standard"
    assert other.live_version("wiki") == first.version
    other.close()


def test_retention_leaves_aliases_with_a_common_prefix_alone(es_backend: ElasticsearchBackend) -> None:
    other = es_backend.build("wiki-2", CORPUS)
    for i in range(3):
        es_backend.build("wiki", CORPUS[: i + 1])
    assert es_backend.live_version("wiki-2") == other.version
    assert es_backend.client.indices.exists(index=other.name)


def test_rebuilding_an_older_version_switches_back_without_reindexing(es_backend: ElasticsearchBackend) -> None:
    old = es_backend.build("wiki", CORPUS)
    new = es_backend.build("wiki", CORPUS[:2])
    assert es_backend.live_version("wiki") == new.version
    back = es_backend.build("wiki", CORPUS)
    assert not back.created and back.name == old.name
    assert es_backend.live_version("wiki") == old.version


def test_search_batches_are_split_into_msearch_requests_in_order(es_url: str, es_cfg: ElasticsearchConfig) -> None:
    cfg = es_cfg.model_copy(update={"msearch_max_batch": 2})
    with ElasticsearchBackend(cfg, url=es_url) as backend:
        try:
            backend.build("wiki", CORPUS)
            queries = ["Shirley Temple diplomat", "1945 comedy film", "voice actress", "Golden Age radio program",
                       "Chief of Protocol"]
            results = backend.search("wiki", queries, k=1)
            assert [r[0].id for r in results] == ["p1", "p2", "p3", "p4", "p1"]
            assert backend.search("wiki", [], k=3) == []
        finally:
            from tests.es_fixtures import drop_indices

            drop_indices(backend)


def test_search_on_a_missing_alias_names_the_alias(es_backend: ElasticsearchBackend) -> None:
    assert es_backend.live_version("nothing-here") is None
    with pytest.raises(SearchError, match=r"nothing-here.*(index_not_found|no such index)"):
        es_backend.search("nothing-here", ["anything"], k=3)


def test_bad_alias_and_duplicate_ids_are_refused_before_any_write(es_backend: ElasticsearchBackend) -> None:
    with pytest.raises(ValueError, match="Wiki"):
        es_backend.build("Wiki", CORPUS)
    with pytest.raises(ValueError, match="no passages"):
        es_backend.build("wiki", [])
    with pytest.raises(ValueError, match=r"duplicate id 'p1' at row 4"):
        es_backend.build("wiki", CORPUS + [CORPUS[0]])
    assert es_backend.live_version("wiki") is None


def test_health_check_names_the_url_and_cause_promptly() -> None:
    cfg = ElasticsearchConfig(request_timeout_s=2.0, max_retries=1, retry_backoff_s=0.05)
    backend = ElasticsearchBackend(cfg, url="http://127.0.0.1:9")  # nothing listens on the discard port
    t0 = time.monotonic()
    with pytest.raises(SearchError, match=r"http://127\.0\.0\.1:9.*ConnectionError"):
        backend.health()
    with pytest.raises(SearchError, match=r"http://127\.0\.0\.1:9.*after 2 attempts.*ConnectionError"):
        backend.search("wiki", ["q"], k=1)
    assert time.monotonic() - t0 < 10
    backend.close()


def test_health_is_green_or_yellow_on_the_real_server(es_backend: ElasticsearchBackend) -> None:
    assert es_backend.health() in ("green", "yellow")
