"""The index stage: one search index per corpus (alias = corpus name), versioned by corpus hash.

Reads artifacts/prepared/passages.parquet; writes artifacts/index/manifest.json (alias -> version, name, n_docs,
backend). Re-running on an unchanged corpus rebuilds nothing (the backend's build is a no-op per version).
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

from components import artifacts
from components.config import Config
from components.data.prepare import read_passages
from components.data.schema import Passage
from components.io import exclusive, write_json
from components.retrieval.factory import make_backend


def manifest_path(cfg: Config) -> Path:
    return artifacts.index_manifest(cfg)


def by_corpus(passages: list[Passage]) -> dict[str, list[Passage]]:
    groups: dict[str, list[Passage]] = defaultdict(list)
    for p in passages:
        groups[p.corpus].append(p)
    return dict(sorted(groups.items()))


def run(cfg: Config, tracker) -> dict[str, float]:
    source = artifacts.require(cfg, artifacts.passages(cfg))
    corpora = by_corpus(read_passages(source))
    if not corpora:
        raise ValueError(f"{source}: no passages to index")

    backend = make_backend(cfg)
    manifest: dict[str, dict] = {}
    metrics: dict[str, float] = {}
    built = 0
    start = time.perf_counter()
    total = sum(map(len, corpora.values()))
    bar = tqdm(total=total, desc=f"index {cfg.retrieval.backend}", unit="passage", disable=None, dynamic_ncols=True)
    try:
        for alias, passages in corpora.items():
            bar.set_postfix_str(alias, refresh=False)
            v = backend.build(alias, passages, bar.update)
            built += v.created
            manifest[alias] = {"version": v.version, "name": v.name, "n_docs": v.n_docs, "backend": cfg.retrieval.backend}
            metrics[f"docs/{alias}"] = v.n_docs
    finally:
        bar.close()
        backend.close()
    seconds = time.perf_counter() - start

    with exclusive(manifest_path(cfg).parent):  # also clears a killed run's temp manifest
        write_json(manifest_path(cfg), manifest)
    tracker.log_input(source, context="index.passages")
    tracker.log_dict(manifest, "index_manifest.json")
    docs = sum(m["n_docs"] for m in manifest.values())
    return metrics | {
        "docs": docs,
        "indexes": len(manifest),
        "indexes_built": built,
        "seconds": seconds,
        "passages_per_s": docs / seconds if seconds > 0 else 0.0,
    }
