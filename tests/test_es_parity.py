"""Parity on the HotpotQA sample: ES and the embedded BM25 backend, same query text, same corpus."""

from __future__ import annotations

import pytest

from components.config import EmbeddedConfig
from components.retrieval.elasticsearch import ElasticsearchBackend
from components.retrieval.embedded import EmbeddedBackend

pytestmark = pytest.mark.es


def recall_at(results, questions) -> float:
    return sum(
        len({h.id for h in hits} & set(q.supporting_ids)) / len(q.supporting_ids) for hits, q in zip(results, questions)
    ) / len(questions)


def test_es_matches_embedded_bm25_on_hotpotqa(es_backend: ElasticsearchBackend, hotpotqa_sample, tmp_path) -> None:
    questions, passages = hotpotqa_sample
    assert len(questions) == 300 and len(passages) == 2964
    texts = [q.question for q in questions]

    es_backend.build("hotpotqa", passages)
    es_top5 = es_backend.search("hotpotqa", texts, k=5)
    embedded = EmbeddedBackend(tmp_path, EmbeddedConfig())
    embedded.build("hotpotqa", passages)
    emb_top5 = embedded.search("hotpotqa", texts, k=5)

    overlap = sum(len({h.id for h in a} & {h.id for h in b}) / 5 for a, b in zip(es_top5, emb_top5)) / len(texts)
    es_recall, emb_recall = recall_at(es_top5, questions), recall_at(emb_top5, questions)
    print(f"top-5 overlap {overlap:.3f}; recall@5 es {es_recall:.3f} embedded {emb_recall:.3f}")
    assert all(len(r) == 5 for r in es_top5)
    assert overlap >= 0.8
    assert abs(es_recall - emb_recall) <= 0.03
    assert es_recall > 0.5  # BM25 finds most supporting paragraphs among 2,964
