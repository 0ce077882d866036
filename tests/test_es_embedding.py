"""The optional dense_vector field: filled from a local encoder, searched by kNN and hybrid BM25 + kNN."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config import ElasticsearchConfig
from components.data.schema import Passage
from components.retrieval.elasticsearch import ElasticsearchBackend
from components.retrieval.es_embedding import Embedder, load_embedder

CORPUS = [
    Passage("a", "Shirley Temple", "an american actress and diplomat"),
    Passage("b", "Kiss and Tell", "a comedy film from 1945"),
    Passage("c", "Janet Waldo", "a radio and voice actress"),
]


def tiny_encoder(path: Path) -> Path:
    """A randomly initialised 1-layer BERT with a word-level tokenizer over the corpus words, saved locally."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    words = sorted({w for p in CORPUS for w in f"{p.title} {p.text}".lower().split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(path)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(path)
    return path


def test_missing_model_leaves_bm25_only(tmp_path: Path, caplog) -> None:
    assert load_embedder(None) is None
    assert load_embedder(str(tmp_path / "nope")) is None
    assert "nope is not a local model directory" in caplog.text


def test_embedder_gives_unit_vectors_of_the_model_width(tmp_path: Path) -> None:
    emb = Embedder(tiny_encoder(tmp_path / "enc"))
    vecs = emb(["an american actress", "a comedy film from 1945", "unknown words only"])
    assert emb.dims == 16 and [len(v) for v in vecs] == [16, 16, 16]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vecs)


@pytest.mark.es
def test_dense_vectors_are_indexed_and_searched(tmp_path: Path, es_url: str, es_cfg: ElasticsearchConfig) -> None:
    from tests.es_fixtures import drop_indices

    cfg = es_cfg.model_copy(update={"embedding_model": str(tiny_encoder(tmp_path / "enc"))})
    backend = ElasticsearchBackend(cfg, url=es_url)
    try:
        assert backend.embedder is not None and backend.embedding_dims == 16
        v = backend.build("dense", CORPUS)
        props = backend.client.indices.get_mapping(index=v.name).body[v.name]["mappings"]["properties"]
        assert props["embedding"] == {"type": "dense_vector", "dims": 16, "index": True, "similarity": "cosine"}
        # pure kNN with a passage's own vector finds that passage first
        target = CORPUS[2]
        [vec] = backend.embedder([f"{target.title}\n{target.text}"])
        knn = backend.client.search(index=backend.alias_name("dense"),
                                    knn={"field": "embedding", "query_vector": vec, "k": 1, "num_candidates": 3})
        assert knn.body["hits"]["hits"][0]["_id"] == "c"
        # hybrid: BM25 + kNN through the backend; a word-less query still gets kNN neighbours
        [hybrid] = backend.search("dense", ["voice actress"], k=3)
        assert hybrid[0].id == "c"
        [vector_only] = backend.search("dense", ["*:*"], k=2)
        assert len(vector_only) == 2
    finally:
        drop_indices(backend)
        backend.close()
