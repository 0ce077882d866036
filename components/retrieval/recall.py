"""Retrieval evaluation: recall@k of supporting passages, using the question itself as the query.

recall@k of one question = |top-k hits ∩ supporting ids| / |supporting ids|, averaged per dataset and over all.
Writes artifacts/metrics/retrieval.json (DVC metrics) and returns the same flat keys, e.g. `recall@5/hotpotqa`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from components import artifacts
from components.config import Config
from components.data.prepare import read_questions
from components.data.schema import Question
from components.io import write_json
from components.retrieval.base import SearchBackend
from components.retrieval.factory import make_backend

BATCH = 256


def metrics_path(cfg: Config) -> Path:
    return artifacts.retrieval_metrics(cfg)


def recall_at_k(
    backend: SearchBackend, questions: Sequence[Question], ks: Sequence[int]
) -> dict[str, float]:
    """Flat metrics: recall@k/<dataset>, recall@k/all, questions/<dataset> (only questions with supporting ids)."""
    ks = sorted(set(ks))
    sums: dict[tuple[int, str], float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    by_corpus: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        if q.supporting_ids:
            by_corpus[q.corpus].append(q)
    for corpus, qs in sorted(by_corpus.items()):
        for i in range(0, len(qs), BATCH):
            chunk = qs[i : i + BATCH]
            results = backend.search(corpus, [q.question for q in chunk], ks[-1])
            for q, hits in zip(chunk, results):
                gold = set(q.supporting_ids)
                ids = [h.id for h in hits]
                counts[q.dataset] += 1
                for k in ks:
                    r = len(gold.intersection(ids[:k])) / len(gold)
                    sums[(k, q.dataset)] += r
                    sums[(k, "all")] += r
    metrics: dict[str, float] = {}
    total = sum(counts.values())
    for dataset in sorted(counts):
        metrics[f"questions/{dataset}"] = counts[dataset]
    for k in ks:
        for dataset in sorted(counts):
            metrics[f"recall@{k}/{dataset}"] = sums[(k, dataset)] / counts[dataset]
        if total:
            metrics[f"recall@{k}/all"] = sums[(k, "all")] / total
    return metrics


def run(cfg: Config, tracker) -> dict[str, float]:
    questions = read_questions(artifacts.require(cfg, artifacts.questions(cfg)))
    backend = make_backend(cfg)
    try:
        metrics = recall_at_k(backend, questions, cfg.retrieval.eval_k)
    finally:
        backend.close()
    write_json(metrics_path(cfg), metrics)
    return metrics
