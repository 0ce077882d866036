"""Hostile query text against the real server: searched as literal words, never as syntax, never everything."""

from __future__ import annotations

import pytest

from components.data.schema import Passage
from components.retrieval.elasticsearch import ElasticsearchBackend
from components.retrieval.es_mapping import clean_query

pytestmark = pytest.mark.es

CORPUS = [Passage(f"p{i}", f"Title {i}", f"passage number {i} about topic{i % 3}") for i in range(12)] + [
    Passage("x", "x", "the letter x stands alone here"),
    Passage("emoji", "Party", "a party with 🎉 confetti and cake"),
]

HOSTILE = [
    "*:*",
    "*",
    "title:x",
    'title:"Title 1" OR text:*',
    '"',
    "\\",
    "a\\",
    "(((",
    "topic1 AND NOT topic2 || {!lucene} ~2 ^3 [1 TO 9]",
    "/.*/",
    "🎉🎉",
    "caf\u00e9 \u0000\u0007\u001b[31m ctrl\u007f \ud800",
    "word " * 20_000,  # 100 kB
    "",
    "   \t\n",
]


@pytest.fixture
def corpus_backend(es_backend: ElasticsearchBackend) -> ElasticsearchBackend:
    es_backend.build("hostile", CORPUS)
    return es_backend


def test_hostile_queries_neither_error_nor_match_everything(corpus_backend: ElasticsearchBackend) -> None:
    results = corpus_backend.search("hostile", HOSTILE, k=len(CORPUS))
    assert len(results) == len(HOSTILE)
    for query, hits in zip(HOSTILE, results):
        assert len(hits) < len(CORPUS), f"{query[:40]!r} matched every passage"
    by_query = dict(zip(HOSTILE[:4], results[:4]))
    assert by_query["*:*"] == [] and by_query["*"] == []
    # a field query would return passage "x"; as literal text UAX#29 keeps "title:x" one word, found nowhere
    assert by_query["title:x"] == []
    assert [h.id for h in results[HOSTILE.index("🎉🎉")]] == ["emoji"]  # emoji is a literal token


def test_lucene_operators_are_plain_words(corpus_backend: ElasticsearchBackend) -> None:
    [hits] = corpus_backend.search("hostile", ["topic1 AND NOT topic2"], k=len(CORPUS))
    ids = {h.id for h in hits}
    # literal: passages with topic1 *and* those with topic2 match (as words); 'not' is a stopword
    assert {"p1", "p4", "p2", "p5"} <= ids


def test_clean_query_strips_control_characters_and_truncates() -> None:
    assert clean_query("a\u0000b\u0007c\td\ne", 100) == "a b c\td\ne"
    assert clean_query("x" * 50, 10) == "x" * 10
    assert clean_query("bad \ud800 surrogate", 100) == "bad ? surrogate"
