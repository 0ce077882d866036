"""Search backends over passage corpora (embedded BM25, Elasticsearch), versioned indexes, recall@k."""
