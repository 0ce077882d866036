"""The SearchBackend interface every retriever implements (embedded BM25, Elasticsearch)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from components.data.schema import Passage

Progress = Callable[[int], None]  # told of every n passages indexed


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    score: float


@dataclass(frozen=True)
class IndexVersion:
    alias: str  # the stable name searches use, e.g. "synthetic"
    version: str  # corpus hash
    name: str  # physical index name, e.g. "synthetic-<hash12>"
    n_docs: int
    created: bool  # False when an index for this corpus hash already existed (no-op)


class SearchError(RuntimeError):
    """The backend could not answer (server down, index missing); the message names URL/index and cause."""


def corpus_hash(passages: Sequence[Passage]) -> str:
    """Content digest of a corpus, independent of passage order."""
    h = hashlib.sha256()
    for p in sorted(passages, key=lambda p: p.id):
        for part in (p.id, p.title, p.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x1f")
        h.update(b"\x1e")
    return h.hexdigest()


@runtime_checkable
class SearchBackend(Protocol):
    def build(self, alias: str, passages: Sequence[Passage], progress: Progress | None = None) -> IndexVersion:
        """Index `passages` as version corpus_hash(passages), then point `alias` at it atomically.

        A no-op (created=False) when that version already exists and is live. `progress(n)` is told of every n
        passages indexed (all of them at once for a no-op).
        """
        ...

    def live_version(self, alias: str) -> str | None:
        """The corpus hash `alias` currently points at, or None."""
        ...

    def search(self, alias: str, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Batched search: one ranked hit list per query. Queries are literal text, never query syntax."""
        ...

    def reseed(self, *key: int) -> None:
        """Restart tie-breaking from (seed, *key): a caller reseeding per step makes tie orders a pure function
        of (seed, step), so a resumed run meets the ties an uninterrupted one did."""
        ...

    def close(self) -> None: ...
