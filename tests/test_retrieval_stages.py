"""The index stage (one versioned index per corpus, no-op on rerun) and retrieval evaluation (recall@k)."""

from __future__ import annotations

import json

import pytest

from components.config import parse_config
from components import artifacts
from components.data.prepare import write_passages, write_questions
from components.data.schema import Passage, Question
from components.retrieval import index, recall
from components.retrieval.factory import make_backend
from components.tracking.tracker import NullTracker

PASSAGES = [
    Passage("fr", "France", "Paris is the capital and largest city of France.", "wiki"),
    Passage("it", "Italy", "Rome is the capital city of Italy, founded on seven hills.", "wiki"),
    Passage("jp", "Japan", "Tokyo is the capital of Japan and hosts the imperial palace.", "wiki"),
    Passage("pe", "Peru", "Lima, on the Pacific coast, is the capital of Peru.", "wiki"),
    Passage("s1", "Zorblat", "Zorblat is the mentor of Quix.", "synthetic"),
    Passage("s2", "Quix", "Quix was born in Vellmora.", "synthetic"),
]


def q(id, question, dataset, support, corpus="wiki"):
    return Question(id, question, ["x"], dataset, "dev", support, corpus)


QUESTIONS = [
    q("a", "What is the capital of France?", "toy", ["fr"]),  # recall 1 at every k
    q("b", "Tokyo imperial palace", "toy", ["jp", "it"]),  # only jp shares words: 0.5 at every k
    q("c", "zzz qqq", "toy", ["pe"]),  # nothing matches: 0
    q("d", "no support, not evaluated", "toy", []),
    q("e", "Where was the mentor of Quix born?", "syn", ["s1", "s2"], "synthetic"),
]


@pytest.fixture
def cfg(tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}, "retrieval": {"eval_k": [1, 5]}})
    out = artifacts.prepared(cfg)
    out.mkdir(parents=True)
    write_passages(artifacts.passages(cfg), PASSAGES)
    write_questions(artifacts.questions(cfg), QUESTIONS)
    return cfg


def test_index_builds_one_index_per_corpus_and_reruns_as_noop(cfg):
    first = index.run(cfg, NullTracker())
    assert first["indexes"] == 2 and first["indexes_built"] == 2
    assert first["docs"] == 6 and first["docs/wiki"] == 4 and first["docs/synthetic"] == 2
    assert first["passages_per_s"] > 0
    manifest = json.loads(index.manifest_path(cfg).read_text())
    assert set(manifest) == {"wiki", "synthetic"}
    assert manifest["wiki"]["n_docs"] == 4 and manifest["wiki"]["backend"] == "embedded"
    version_dir = artifacts.index(cfg) / "wiki" / manifest["wiki"]["version"]
    stamp = version_dir.stat().st_mtime_ns

    second = index.run(cfg, NullTracker())
    assert second["indexes_built"] == 0
    assert json.loads(index.manifest_path(cfg).read_text()) == manifest
    assert version_dir.stat().st_mtime_ns == stamp

    backend = make_backend(cfg)
    assert backend.live_version("wiki") == manifest["wiki"]["version"]
    assert backend.search("synthetic", ["mentor of Quix"], 1)[0][0].id == "s1"


def test_index_without_prepared_passages_names_the_file(cfg):
    artifacts.passages(cfg).unlink()
    with pytest.raises(FileNotFoundError, match="passages.parquet"):
        index.run(cfg, NullTracker())
    assert not index.manifest_path(cfg).exists()


def test_retrieval_eval_recall_values(cfg):
    index.run(cfg, NullTracker())
    metrics = recall.run(cfg, NullTracker())
    assert metrics["questions/toy"] == 3 and metrics["questions/syn"] == 1
    assert metrics["recall@1/toy"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["recall@5/toy"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["recall@1/syn"] == pytest.approx(0.5)  # one of the two supporting passages first
    assert metrics["recall@5/syn"] == pytest.approx(1.0)
    assert metrics["recall@5/all"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert json.loads(recall.metrics_path(cfg).read_text()) == pytest.approx(metrics)


def test_retrieval_eval_before_index_fails_clearly(cfg):
    from components.retrieval.base import SearchError

    with pytest.raises(SearchError, match="run the index stage"):
        recall.run(cfg, NullTracker())
    assert not recall.metrics_path(cfg).exists()
