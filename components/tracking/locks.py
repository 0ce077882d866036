"""Locks among the processes of this machine, one per tracking store and purpose (a file in the temp dir)."""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def store_lock(uri: str, purpose: str) -> Iterator[None]:
    """Hold the `purpose` lock of the store at `uri` (e.g. "registry": one registration at a time)."""
    key = hashlib.sha256(uri.encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"agentr1-{purpose}-{key}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
