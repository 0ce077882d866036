"""Elasticsearch benchmark: the project's ES backend vs the raw client (the ceiling) vs the embedded backend.

Same corpus for all three: the HotpotQA sample (2,964 passages) for searches, and that sample repeated --copies
times under new ids for bulk indexing. Reports bulk passages/s, single-query p50/p99 and _msearch q/s for batches
of 64 with the project's query shape (match on title+text `contents`, _source title+text).

    scripts/es.sh start && .venv/bin/python benchmarks/bench_es.py [--copies 5] [--json out.json]
    .venv/bin/python benchmarks/bench_es.py --analyzers   # recall@5 by analyzer and title_boost (the choice)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import elastic_transport  # noqa: E402
from elasticsearch import helpers  # noqa: E402

from components.config import DatasetSpec, ElasticsearchConfig, EmbeddedConfig  # noqa: E402
from components.data.loaders.hotpotqa import load_ircot  # noqa: E402
from components.data.passages import PassageTable  # noqa: E402
from components.data.schema import Passage  # noqa: E402
from components.retrieval.elasticsearch import ElasticsearchBackend  # noqa: E402
from components.retrieval.embedded import EmbeddedBackend  # noqa: E402
from components.retrieval.es_connection import resolve_url  # noqa: E402
from components.retrieval.es_mapping import index_body, search_body  # noqa: E402

HOTPOTQA = REPO / "data" / "hotpotqa" / "dev_distractor_ircot_300.jsonl"
BATCH = 64


def load_sample():
    table = PassageTable()
    spec = DatasetSpec(name="hotpotqa", format="hotpotqa_ircot", path=HOTPOTQA.name)
    questions = load_ircot(spec, HOTPOTQA, table)
    return questions, table.passages


def copies(passages: list[Passage], n: int) -> list[Passage]:
    return [Passage(f"{p.id}#{c}", p.title, p.text, p.corpus) for c in range(n) for p in passages]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@contextmanager
def request_times(into: dict[str, float]) -> Iterator[None]:
    """Seconds per ES endpoint (`_bulk`, `_refresh`, index create ...) spent inside the block: where the time goes."""
    original = elastic_transport.Transport.perform_request

    def timed_request(self, method, target, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, method, target, *args, **kwargs)
        finally:
            path = target.split("?")[0].rstrip("/").split("/")[-1]
            key = f"{method} {path if path.startswith('_') else '<index>'}"
            into[key] = into.get(key, 0.0) + time.perf_counter() - t0

    elastic_transport.Transport.perform_request = timed_request
    try:
        yield
    finally:
        elastic_transport.Transport.perform_request = original


class System:
    """One contender: how it bulk-loads a corpus under a fresh name, and how it answers one query / a batch."""

    def __init__(self, name: str, load: Callable[[str, list[Passage]], object],
                 one: Callable[[str], object], batch: Callable[[list[str]], object]) -> None:
        self.name, self.load, self.one, self.batch = name, load, one, batch


def project_system(cfg: ElasticsearchConfig, sample: list[Passage]) -> System:
    es = ElasticsearchBackend(cfg)
    es.build("sample", sample)
    return System("project_es", lambda name, ps: es.build(name, ps),
                  lambda q: es.search("sample", [q], 5), lambda b: es.search("sample", b, 5))


def raw_system(cfg: ElasticsearchConfig, sample: list[Passage], source: bool = True) -> System:
    """The same work with the bare client: same mapping and query shape, prebuilt actions, no project code."""
    es = ElasticsearchBackend(cfg).client  # only for the connection settings
    index = f"{cfg.index_prefix}raw-sample"

    def load(name: str, passages: list[Passage], tuned: bool = True) -> None:
        body = index_body(cfg, "raw")
        if not tuned:
            body["settings"] = {}
        es.indices.create(index=f"{cfg.index_prefix}raw-{name}", **body)
        actions = [{"_index": f"{cfg.index_prefix}raw-{name}", "_id": p.id,
                    "_source": {"title": p.title, "text": p.text, "corpus": p.corpus}} for p in passages]
        helpers.bulk(es.options(request_timeout=300), actions, chunk_size=cfg.bulk_chunk_size)
        es.indices.refresh(index=f"{cfg.index_prefix}raw-{name}")

    def body(q: str) -> dict:
        b = search_body(cfg, q, 5)
        if not source:
            b["_source"] = False
        return b

    if source:
        load("sample", sample)

    def msearch(batch: list[str]) -> object:
        searches: list[dict] = []
        for q in batch:
            searches += [{"index": index}, body(q)]
        return es.msearch(searches=searches)

    system = System("raw_client" if source else "raw_no_source", load,
                    lambda q: es.search(index=index, **body(q)), msearch)
    system.load_defaults = lambda name, ps: load(name, ps, tuned=False)  # type: ignore[attr-defined]
    return system


def embedded_system(root: str, sample: list[Passage]) -> System:
    emb = EmbeddedBackend(root, EmbeddedConfig())
    emb.build("sample", sample)
    return System("embedded", lambda name, ps: emb.build(name, ps),
                  lambda q: emb.search("sample", [q], 5), lambda b: emb.search("sample", b, 5))


def measure(systems: list[System], bulk: list[Passage], queries: list[str], rounds: int) -> dict[str, dict]:
    """Interleaved: each bulk, query and batch runs on every system in turn, so load from other work is shared."""
    out: dict[str, dict] = {s.name: {} for s in systems}
    loaders = [s for s in systems if s.name != "raw_no_source"]
    for r in range(2):  # best of two bulk loads, order rotated
        for s in loaders[r % len(loaders):] + loaders[: r % len(loaders)]:
            spent: dict[str, float] = {}
            with request_times(spent):
                secs = timed(lambda s=s: s.load(f"bulk{r}", bulk))
            if spent and secs * len(bulk) and len(bulk) / secs >= out[s.name].get("bulk_passages_per_s", 0):
                spent["wall minus summed requests (<0: overlapped)"] = secs - sum(spent.values())
                out[s.name]["bulk_breakdown_s"] = {k: round(v, 3) for k, v in sorted(spent.items())}
            out[s.name]["bulk_passages_per_s"] = max(out[s.name].get("bulk_passages_per_s", 0), len(bulk) / secs)
            if hasattr(s, "load_defaults"):
                secs = timed(lambda s=s: s.load_defaults(f"bulkdefaults{r}", bulk))
                out[s.name]["bulk_defaults_passages_per_s"] = max(
                    out[s.name].get("bulk_defaults_passages_per_s", 0), len(bulk) / secs)
    ms: dict[str, list[float]] = {s.name: [] for s in systems}
    for i, q in enumerate(queries):
        for s in systems:
            t = 1000 * timed(lambda s=s: s.one(q))
            if i >= 20:  # warm-up
                ms[s.name].append(t)
    for s in systems:
        v = sorted(ms[s.name])
        out[s.name].update(p50_ms=statistics.median(v), p99_ms=v[min(len(v) - 1, int(0.99 * len(v)))])
    batches = [queries[i : i + BATCH] for i in range(0, len(queries) - BATCH + 1, BATCH)]
    secs = {s.name: 0.0 for s in systems}
    for s in systems:
        s.batch(batches[0])  # warm-up
    for _ in range(rounds):
        for b in batches:
            for s in systems:
                secs[s.name] += timed(lambda s=s, b=b: s.batch(b))
    for s in systems:
        out[s.name]["msearch64_qps"] = rounds * len(batches) * BATCH / secs[s.name]
    return out


def drop(client, prefix: str) -> None:
    found = client.options(ignore_status=404).indices.get(index=f"{prefix}*", allow_no_indices=True)
    for name in found.body if found.meta.status == 200 else {}:
        client.indices.delete(index=name)


def batch_qps(search_batch: Callable[[list[str]], object], queries: list[str], rounds: int) -> float:
    batches = [queries[i : i + BATCH] for i in range(0, len(queries) - BATCH + 1, BATCH)]
    search_batch(batches[0])  # warm-up
    t = sum(timed(lambda b=b: search_batch(b)) for _ in range(rounds) for b in batches)
    return rounds * len(batches) * BATCH / t


def analyzers(questions, passages) -> list[dict]:
    """recall@5 of each analyzer and title weight, and top-5 overlap with the embedded backend."""
    texts = [q.question for q in questions]

    def recall(results) -> float:
        return sum(len({h.id for h in r} & set(q.supporting_ids)) / len(q.supporting_ids)
                   for r, q in zip(results, questions)) / len(questions)

    with tempfile.TemporaryDirectory() as root:
        emb = EmbeddedBackend(root, EmbeddedConfig())
        emb.build("hotpotqa", passages)
        ref = emb.search("hotpotqa", texts, 5)
    rows = [{"backend": "embedded", "recall@5": recall(ref)}]
    for analyzer in ("standard", "english"):
        for boost in (0.0, 0.5, 1.0, 2.0):
            cfg = ElasticsearchConfig(analyzer=analyzer, title_boost=boost, index_prefix=f"agentr1-bench-{analyzer}-")
            es = ElasticsearchBackend(cfg)
            try:
                es.build("hotpotqa", passages)
                got = es.search("hotpotqa", texts, 5)
                qps = batch_qps(lambda b, es=es: es.search("hotpotqa", b, 5), texts, 3)
            finally:
                drop(es.client, cfg.index_prefix)
                es.close()
            overlap = sum(len({h.id for h in a} & {h.id for h in b}) / 5 for a, b in zip(got, ref)) / len(texts)
            rows.append({"backend": f"es {analyzer} title_boost={boost:g}", "recall@5": recall(got),
                         "overlap_with_embedded": overlap, "msearch64_qps": qps})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=5, help="bulk corpus = the sample repeated this many times")
    ap.add_argument("--rounds", type=int, default=5, help="passes over the 300 questions for _msearch q/s")
    ap.add_argument("--analyzers", action="store_true", help="only the analyzer / title_boost recall table")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    questions, sample = load_sample()
    cfg = ElasticsearchConfig(index_prefix="agentr1-bench-")
    print(f"Elasticsearch at {resolve_url(cfg)}; corpus: HotpotQA sample, {len(sample)} passages, "
          f"{len(questions)} questions", flush=True)
    if args.analyzers:
        result: object = analyzers(questions, sample)
        for row in result:  # type: ignore[union-attr]
            print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    else:
        bulk = copies(sample, args.copies)
        queries = [q.question for q in questions]
        with tempfile.TemporaryDirectory() as root:
            systems = [project_system(cfg, sample), raw_system(cfg, sample), raw_system(cfg, sample, source=False),
                       embedded_system(root, sample)]
            try:
                result = measure(systems, bulk, queries, args.rounds)
            finally:
                client = ElasticsearchBackend(cfg).client
                drop(client, cfg.index_prefix)
                client.close()
        p, r = result["project_es"], result["raw_client"]
        result["ratios"] = {
            "bulk_project_over_raw": p["bulk_passages_per_s"] / r["bulk_passages_per_s"],
            "msearch_project_over_raw": p["msearch64_qps"] / r["msearch64_qps"],
        }
        print(f"bulk corpus: {len(bulk)} passages; batches of {BATCH}")
        for name, row in result.items():
            print(f"  {name:11s} " + "  ".join(f"{k}={v:,.2f}" for k, v in row.items() if not isinstance(v, dict)))
        for name, row in result.items():
            if "bulk_breakdown_s" in row:
                print(f"  {name} bulk time by request: {row['bulk_breakdown_s']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
