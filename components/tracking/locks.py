"""Locks among the processes of this machine, one per tracking store and purpose: a file beside a SQLite store's
database (it goes when the store goes), else in the temp dir."""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def store_file(uri: str) -> Path | None:
    """The sqlite file of the MLflow store at `uri`, when the store is one."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def lock_path(uri: str, purpose: str) -> Path:
    """Where the `purpose` lock of the store at `uri` lives."""
    db = store_file(uri)
    if db is not None and db.parent.is_dir():
        return Path(f"{db}.{purpose}.lock")
    key = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"agentr1-{purpose}-{key}.lock"


@contextmanager
def store_lock(uri: str, purpose: str) -> Iterator[None]:
    """Hold the `purpose` lock of the store at `uri` (e.g. "registry": one registration at a time)."""
    with open(lock_path(uri, purpose), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
