"""Embedded BM25 backend: in-process, no server. bm25s builds the index; scipy scores a batch in one sparse product.

Layout under `root`:
    <alias>/<corpus_hash>/   one immutable version: bm25s arrays + passages.parquet + meta.json
    <alias>/LIVE             pointer file naming the live version, swapped atomically with os.replace

Queries are literal text: they are tokenized exactly like passages (lowercase words, English stopwords removed),
so `title:x AND y*` is just the words title, x, y; a query with no known words returns no hits.

Ties are fair: passages with equal scores are ordered by a random key drawn per call from an rng (the backend's
own seeded one, or one passed in), never by passage id, so a policy cannot learn to exploit a fixed tie order.
`reseed(*key)` restarts the backend's rng from (seed, *key); the trainer reseeds per step and per evaluation.

Engine: bm25s over tantivy: one sparse product scores a batch of queries 3-4x faster at equal recall, and
fair ties need every passage's score (docs/design-choices.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
from bm25s.tokenization import Tokenized
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from components.config import EmbeddedConfig
from components.data.schema import Passage
from components.io import atomic_path, exclusive, size_of, write_json, write_text
from components.retrieval.base import Hit, IndexVersion, Progress, SearchError, corpus_hash

_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_LIVE = "LIVE"
_META = "meta.json"
_PASSAGES = "passages.parquet"
_TOKENIZE_CHUNK = 2000


def _ignore(n: int) -> None:
    pass


def _stemmer(name: str | None):
    if name is None:
        return None
    try:
        import Stemmer  # PyStemmer, only when configured
    except ImportError:
        raise ImportError(
            "retrieval.embedded.stemmer is set but PyStemmer is missing: pip install PyStemmer==3.1.0, or set it to null"
        ) from None

    return Stemmer.Stemmer(name)


@dataclass
class _LoadedIndex:
    version: str
    weights: sp.csr_matrix  # vocab x docs, precomputed BM25 term weights
    vocab: dict[str, int]
    ids: list[str]
    titles: list[str]
    texts: list[str]


class EmbeddedBackend:
    """SearchBackend over on-disk bm25s indexes; each alias's live index is loaded once and kept in memory."""

    def __init__(self, root: str | Path, cfg: EmbeddedConfig | None = None, seed: int = 0) -> None:
        self.root = Path(root)
        self.cfg = cfg or EmbeddedConfig()
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._stem = _stemmer(self.cfg.stemmer)
        self._loaded: dict[str, _LoadedIndex] = {}

    # --- tokenization: one function for passages and queries --------------------------------------

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        return bm25s.tokenize(
            list(texts),
            token_pattern=self.cfg.token_pattern,
            stopwords="en",
            stemmer=self._stem,
            return_ids=False,
            show_progress=False,
        )

    def _settings(self) -> dict:
        return {
            "engine": self.cfg.engine,
            "k1": self.cfg.k1,
            "b": self.cfg.b,
            "stemmer": self.cfg.stemmer,
            "token_pattern": self.cfg.token_pattern,
            "title_weight": self.cfg.title_weight,
            "bm25s": bm25s.__version__,
            "vocab": "sorted",
        }

    # --- versions and the alias pointer --------------------------------------------------------------

    def _alias_dir(self, alias: str) -> Path:
        if not isinstance(alias, str) or not _ALIAS.match(alias):
            raise ValueError(f"index alias {alias!r}: use letters, digits, '_' or '-' (at most 64)")
        return self.root / alias

    def live_version(self, alias: str) -> str | None:
        pointer = self._alias_dir(alias) / _LIVE
        try:
            version = pointer.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        if not re.fullmatch(r"[0-9a-f]{64}", version):
            raise SearchError(f"{pointer}: not a corpus hash: {version[:80]!r}")
        return version

    def _meta(self, vdir: Path) -> dict | None:
        try:
            return json.loads((vdir / _META).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def build(self, alias: str, passages: Sequence[Passage], progress: Progress | None = None) -> IndexVersion:
        adir = self._alias_dir(alias)
        if not passages:
            raise ValueError(f"index {alias!r}: no passages to index")
        seen: set[str] = set()
        for row, p in enumerate(passages):
            if p.id in seen:
                raise ValueError(f"index {alias!r}: duplicate passage id {p.id!r} (row {row})")
            seen.add(p.id)

        version = corpus_hash(passages)
        vdir = adir / version
        with exclusive(adir):  # one writer per alias; temps left by a killed build are removed first
            meta = self._meta(vdir)
            created = meta is None or meta.get("settings") != self._settings()
            if created:
                live = self.live_version(alias)  # its size: about what a new version of the corpus needs
                with atomic_path(vdir, need=size_of(adir / live) if live else None) as tmp:
                    self._write_version(tmp, alias, version, passages, progress or _ignore)
            elif progress is not None:
                progress(len(passages))
            if self.live_version(alias) != version:
                os.utime(vdir)  # retention keeps the most recently live versions
                write_text(adir / _LIVE, version + "\n")
            self._prune(adir, keep=version)
        return IndexVersion(alias, version, f"{alias}-{version[:12]}", len(passages), created)

    def _write_version(self, out: Path, alias: str, version: str, passages: Sequence[Passage], progress: Progress) -> None:
        title_rep = self.cfg.title_weight
        tokens: list[list[str]] = []
        for start in range(0, len(passages), _TOKENIZE_CHUNK):  # tokenizing is most of the build: report per chunk
            chunk = passages[start : start + _TOKENIZE_CHUNK]
            tokens += self._tokenize([f"{p.title}\n" * title_rep + p.text for p in chunk])
            progress(len(chunk))
        bm25 = bm25s.BM25(k1=self.cfg.k1, b=self.cfg.b, method="lucene")
        bm25.index(_sorted_vocab(tokens), show_progress=False)
        bm25.save(str(out), show_progress=False)
        table = pa.table(
            {
                "id": [p.id for p in passages],
                "title": [p.title for p in passages],
                "text": [p.text for p in passages],
            }
        )
        pq.write_table(table, out / _PASSAGES)
        meta = {"alias": alias, "version": version, "n_docs": len(passages), "settings": self._settings()}
        write_json(out / _META, meta)

    def _prune(self, adir: Path, keep: str) -> None:
        versions = [d for d in adir.iterdir() if d.is_dir() and re.fullmatch(r"[0-9a-f]{64}", d.name)]
        versions.sort(key=lambda d: d.stat().st_mtime, reverse=True)
        old = [d for d in versions if d.name != keep][max(self.cfg.retention - 1, 0) :]
        for d in old:  # renamed out of sight first: a kill mid-delete must not leave a half version to reuse
            gone = d.with_name(f".{d.name}.old")  # exclusive() removes it if the delete is killed
            os.replace(d, gone)
            shutil.rmtree(gone, ignore_errors=True)

    # --- search --------------------------------------------------------------------------------------

    def _index(self, alias: str) -> _LoadedIndex:
        version = self.live_version(alias)
        if version is None:
            raise SearchError(f"index {alias!r}: no live version under {self._alias_dir(alias)} (run the index stage)")
        loaded = self._loaded.get(alias)
        if loaded is None or loaded.version != version:
            loaded = self._loaded[alias] = self._load(self._alias_dir(alias) / version, version)
        return loaded

    def _load(self, vdir: Path, version: str) -> _LoadedIndex:
        try:
            bm25 = bm25s.BM25.load(str(vdir), show_progress=False)
            table = pq.read_table(vdir / _PASSAGES)
        except (OSError, ValueError) as err:
            raise SearchError(f"{vdir}: cannot load index: {err}") from err
        s = bm25.scores
        # bm25s stores a docs x vocab CSC matrix: the same arrays read as vocab x docs CSR.
        weights = sp.csr_matrix(
            (s["data"], s["indices"], s["indptr"]), shape=(len(s["indptr"]) - 1, s["num_docs"])
        )
        cols = table.to_pydict()
        return _LoadedIndex(version, weights, bm25.vocab_dict, cols["id"], cols["title"], cols["text"])

    def _query_matrix(self, index: _LoadedIndex, queries: Sequence[str]) -> sp.csr_matrix:
        rows: list[int] = []
        cols: list[int] = []
        for i, tokens in enumerate(self._tokenize([q if isinstance(q, str) else "" for q in queries])):
            ids = [index.vocab[t] for t in tokens if t and t in index.vocab]
            rows.extend([i] * len(ids))
            cols.extend(ids)
        data = np.ones(len(cols), dtype=np.float32)  # repeated words count once per occurrence, like bm25s
        return sp.csr_matrix((data, (rows, cols)), shape=(len(queries), index.weights.shape[0]))

    def search(
        self, alias: str, queries: Sequence[str], k: int, rng: np.random.Generator | None = None
    ) -> list[list[Hit]]:
        """One ranked list of at most k hits per query; only passages sharing a word with the query score."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if not queries:
            return []
        index = self._index(alias)
        rng = rng if rng is not None else self.rng
        scores = (self._query_matrix(index, queries) @ index.weights).tocsr()
        results = []
        for i in range(len(queries)):
            lo, hi = scores.indptr[i], scores.indptr[i + 1]
            docs, vals = scores.indices[lo:hi], scores.data[lo:hi]
            top = top_k_fair(vals, k, rng)
            results.append(
                [Hit(index.ids[d], index.titles[d], index.texts[d], float(v)) for d, v in zip(docs[top], vals[top])]
            )
        return results

    def reseed(self, *key: int) -> None:
        self.rng = np.random.default_rng([self.seed, *key])

    def close(self) -> None:
        self._loaded.clear()


def top_k_fair(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of the k highest positive scores, best first; equal scores are ordered by a random key."""
    pos = np.flatnonzero(scores > 0)
    if pos.size > k:
        kth = np.partition(scores[pos], pos.size - k)[pos.size - k]
        pos = pos[scores[pos] >= kth]  # keeps every passage tied with the k-th
    order = np.lexsort((rng.random(pos.size), -scores[pos]))
    return pos[order[:k]]


def _sorted_vocab(tokens: list[list[str]]) -> Tokenized:
    """Token ids in sorted order: bm25s would number them in set order, which changes with PYTHONHASHSEED."""
    vocab = {t: i for i, t in enumerate(sorted({t for doc in tokens for t in doc}))}
    return Tokenized(ids=[[vocab[t] for t in doc] for doc in tokens], vocab=vocab)
