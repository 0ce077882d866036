"""Embedded BM25 benchmark: indexing passages/s, batched search QPS (64/128), single-query p50/p99 latency,
and recall@5 of HotpotQA supporting passages, on the shipped corpus (KILT wiki sample + HotpotQA paragraphs
+ synthetic one-fact passages).

    .venv/bin/python benchmarks/bench_embedded.py            # the embedded backend
    .venv/bin/python benchmarks/bench_embedded.py --compare  # also tantivy (pip install tantivy) for the engine choice
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.config import EmbeddedConfig, load_config  # noqa: E402
from components.data.prepare import load_all  # noqa: E402
from components.data.schema import Passage  # noqa: E402
from components.retrieval.embedded import EmbeddedBackend  # noqa: E402


def corpus() -> tuple[list[Passage], list[tuple[str, set[str]]]]:
    """The pipeline's own corpus (params.yaml through the prepare loaders): wiki + synthetic passages;
    queries are the HotpotQA dev questions with their supporting passage ids, then synthetic dev questions."""
    cfg = load_config(ROOT / "params.yaml", {"project.data_dir": str(ROOT / "data")})
    questions, passages = load_all(cfg.data, cfg.data_root)
    passages = [p for p in passages if p.corpus in ("wiki", "synthetic")]
    hotpot = [(q.question, set(q.supporting_ids)) for q in questions if q.dataset == "hotpotqa"]
    synthetic = [(q.question, set()) for q in questions if q.dataset == "synthetic" and q.split == "dev"]
    return passages, hotpot + synthetic


def recall_at(ranked: list[list[str]], questions: list[tuple[str, set[str]]], k: int) -> float:
    """Mean recall@k over the questions that have supporting ids (HotpotQA)."""
    return statistics.mean(len(set(r[:k]) & s) / len(s) for r, (_, s) in zip(ranked, questions) if s)


def measure(name: str, build, search, passages, questions, repeats: int) -> dict:
    """build() -> None; search(list[str], k) -> list[list[str]] of ids."""
    t = time.perf_counter()
    build()
    index_s = time.perf_counter() - t
    texts = [q for q, _ in questions]
    search(texts[:8], 5)  # warm: load the index
    row = {"engine": name, "passages": len(passages), "index_passages_per_s": len(passages) / index_s}
    for batch in (64, 128):
        batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        t = time.perf_counter()
        for _ in range(repeats):
            for b in batches:
                search(b, 5)
        row[f"qps_batch{batch}"] = repeats * len(texts) / (time.perf_counter() - t)
    lat = []
    for q in texts:
        t = time.perf_counter()
        search([q], 5)
        lat.append(time.perf_counter() - t)
    row["single_qps"] = len(lat) / sum(lat)
    row["single_p50_ms"] = 1000 * float(np.percentile(lat, 50))
    row["single_p99_ms"] = 1000 * float(np.percentile(lat, 99))
    ranked = search(texts, 10)
    row["recall@5_hotpotqa"] = recall_at(ranked, questions, 5)
    return row


def embedded(passages, questions, tmp: Path, cfg: EmbeddedConfig, name: str, repeats: int) -> dict:
    backend = EmbeddedBackend(tmp / name, cfg)
    return measure(
        name,
        lambda: backend.build("bench", passages),
        lambda qs, k: [[h.id for h in hits] for hits in backend.search("bench", qs, k)],
        passages,
        questions,
        repeats,
    )


def tantivy_engine(passages, questions, tmp: Path, repeats: int) -> dict:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("title", stored=False, tokenizer_name="en_stem")
    sb.add_text_field("text", stored=False, tokenizer_name="en_stem")
    schema = sb.build()
    state = {}

    def build():
        (tmp / "tantivy").mkdir()
        index = tantivy.Index(schema, path=str(tmp / "tantivy"))
        writer = index.writer(heap_size=100_000_000, num_threads=1)
        for p in passages:
            writer.add_document(tantivy.Document(id=p.id, title=p.title, text=p.text))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        state["index"] = index
        state["searcher"] = index.searcher()

    def search(qs, k):
        index, searcher = state["index"], state["searcher"]
        out = []
        for q in qs:
            # literal text: keep only word characters, then parse as a bag of terms (OR)
            words = " ".join("".join(ch if ch.isalnum() else " " for ch in q).split())
            if not words:
                out.append([])
                continue
            query = index.parse_query(words, ["title", "text"])
            hits = searcher.search(query, k).hits
            out.append([searcher.doc(addr)["id"][0] for _, addr in hits])
        return out

    return measure("tantivy 0.27 (en_stem)", build, search, passages, questions, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--compare", action="store_true", help="also measure tantivy and bm25s variants")
    ap.add_argument("--repeats", type=int, default=3, help="passes over the queries per batched measurement")
    args = ap.parse_args()
    passages, questions = corpus()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows.append(embedded(passages, questions, tmp, EmbeddedConfig(), "bm25s + stemmer (default)", args.repeats))
        if args.compare:
            no_stem = EmbeddedConfig(stemmer=None)
            rows.append(embedded(passages, questions, tmp, no_stem, "bm25s, no stemmer", args.repeats))
            rows.append(tantivy_engine(passages, questions, tmp, args.repeats))
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
