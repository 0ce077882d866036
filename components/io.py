"""Atomic file output: a stage either writes a whole file or directory, or leaves the old one untouched."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `target` (file or directory); move it into place only on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)) / target.name
    try:
        yield tmp
        if target.is_dir() and not target.is_symlink():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


_LEFTOVER = re.compile(r"^\..+\.([a-z0-9_]{8}|old)$")  # atomic_path's temp and .old names


@contextmanager
def exclusive(directory: str | Path) -> Iterator[list[Path]]:
    """Hold `directory`'s writer lock; first remove what killed writers left there (atomic_path temps), which
    no live writer can own while the lock is held. Yields the removed paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed = [p for p in directory.iterdir() if _LEFTOVER.match(p.name)]
        for p in removed:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        yield removed


def write_text(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | Path, obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def remove(*targets: str | Path) -> None:
    """Delete stale outputs so a failed stage leaves none behind."""
    for t in map(Path, targets):
        if t.is_dir() and not t.is_symlink():
            shutil.rmtree(t)
        elif t.exists() or t.is_symlink():
            t.unlink()
