"""Atomic file output: a stage either writes a whole file or directory, or leaves the old one untouched.

A write that runs out of disk space leaves nothing behind either and raises DiskFull: one line naming the path,
what the write needs and what is free."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
LOW_SPACE = 1 << 20  # bytes free under which an errno-less short write counts as a full disk
SQLITE_FULL = "database or disk is full"  # SQLite's words for a full disk (SQLITE_FULL), through SQLAlchemy and MLflow


class DiskFull(OSError):
    """A write ran out of disk space (or quota); the message names the path, what it needs and what is free."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def out_of_space(err: BaseException | None, where: str | Path | None = None) -> bool:
    """Whether `err`, or an error it was raised from or while handling, is a full disk (torch, pyarrow and shutil
    report it in their own words around the OSError; SQLite as SQLITE_FULL, with no OSError). Some writers report a
    short write without an errno (numpy: "8119 requested and 4592 written"): that counts when the filesystem of
    `where` has under LOW_SPACE free."""
    seen, io_error = set(), False
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError):
            if err.errno in NO_SPACE or os.strerror(errno.ENOSPC) in str(err):
                return True
            io_error = io_error or err.errno is None
        elif SQLITE_FULL in str(err):
            return True
        err = err.__cause__ or err.__context__
    return io_error and where is not None and free_space(where) < LOW_SPACE


def full_at(err: BaseException | None) -> str | None:
    """The file whose write found the disk full, when the error names it (a copy names its source, then it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE and err.filename:
            return os.fsdecode(err.filename2 or err.filename)
        err = err.__cause__ or err.__context__
    return None


def _existing_parent(path: str | Path) -> Path:
    """`path` itself if it exists, else its nearest existing parent: where a file about to be written will live."""
    path = Path(path).resolve()
    return next((p for p in (path, *path.parents) if p.exists()), Path("/"))


def free_space(path: str | Path) -> int:
    """Bytes free on the filesystem of `path` (or of its nearest existing parent)."""
    return shutil.disk_usage(_existing_parent(path)).free


def sha256_of(path: str | Path) -> str:
    """A file's SHA-256, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def size_of(path: str | Path) -> int:
    """Bytes of a file, or of every file under a directory (0 when it does not exist)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) if path.is_dir() else 0


def same_disk(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` (or their nearest existing parents) are on one filesystem."""
    return _existing_parent(a).stat().st_dev == _existing_parent(b).stat().st_dev


def human(n: int) -> str:
    """Bytes in KB, MB or GB (powers of 1024), one decimal."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 2**10:.1f} KB"


def disk_full(target: str | Path, need: int | None = None, written: int = 0) -> DiskFull:
    """The error for a write of `target` that found the disk full: its `need` (an estimate) if known, else at least
    what was `written` before the disk filled, and the space free there now."""
    target = Path(target)
    free = free_space(target)
    needs = f"about {human(need)}" if need and need > written else f"more than {human(written)}" if written else ""
    needs = f"it needs {needs}, " if needs else ""
    return DiskFull(f"{target}: no space left on device: {needs}{human(free)} are free there; free some space "
                    f"(or move the project to a larger disk) and run again")  # fmt: skip


@contextmanager
def atomic_path(target: str | Path, need: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside `target` (file or directory); move it into place only on success. A full disk
    raises DiskFull (`need`: the caller's estimate of the bytes written), with the temp path removed."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)) / target.name
    except OSError as err:
        if out_of_space(err):
            raise disk_full(target, need) from None
        raise
    try:
        try:
            yield tmp
        except Exception as err:
            if not out_of_space(err, tmp.parent):
                raise
            written = size_of(tmp)
            shutil.rmtree(tmp.parent, ignore_errors=True)
            raise disk_full(target, need, written) from None
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
