"""Atomic training checkpoints: model, optimizer(s), RNG state, step, MLflow run id, the learning curve so far.

A checkpoint is one directory written through components.io.atomic_path, so a kill -9 leaves either the
previous checkpoint or the new one, never half of one (the next save removes the killed write's temp dir).
Non-finite weights are refused. Each checkpoint carries the SHA-256 of its files (SHA256SUMS, written last);
a damaged one (a disk fault, a truncated or half copy, a file that does not load) is skipped with a warning
for the one before it, so two are kept.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.io import atomic_path, exclusive

_DIR = re.compile(r"^step-(\d{8})$")
STATE = "state.json"
WEIGHTS = "weights.pt"
SUMS = "SHA256SUMS"


class NonFiniteCheckpoint(RuntimeError):
    """Refusing to write a checkpoint whose weights contain NaN or inf."""


class CheckpointError(RuntimeError):
    """No checkpoint under the root can be used; the message names them and what to do."""


def all_checkpoints(root: Path, finished: bool = True) -> list[Path]:
    """Checkpoint directories, newest first: only those with their state file, unless `finished` is False."""
    if not root.is_dir():
        return []
    dirs = (d for d in root.iterdir() if _DIR.match(d.name) and (not finished or (d / STATE).is_file()))
    return sorted(dirs, reverse=True)


def latest(root: Path) -> Path | None:
    done = all_checkpoints(root)
    return done[0] if done else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path) -> str | None:
    """None if every file matches SHA256SUMS, else what is wrong (naming the file)."""
    try:
        sums = dict(reversed(line.split("  ", 1)) for line in (path / SUMS).read_text().splitlines())
    except (OSError, ValueError) as err:
        return f"{path / SUMS}: missing or unreadable ({err})"
    for name in (WEIGHTS, STATE):
        if name not in sums:
            return f"{path / SUMS}: no digest for {name}"
        try:
            if _sha256(path / name) != sums[name]:
                return f"{path / name}: SHA-256 does not match {SUMS} (damaged)"
        except OSError as err:
            return f"{path / name}: unreadable ({err})"
    return None


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save(root: Path, step: int, modules: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer],
         state: dict[str, Any], keep: int = 2) -> Path:  # fmt: skip
    for name, m in modules.items():
        for pname, p in m.named_parameters():
            if not torch.isfinite(p).all():
                raise NonFiniteCheckpoint(f"{name}.{pname} has non-finite values at step {step}")
    target = root / f"step-{step:08d}"
    with exclusive(root), atomic_path(target) as tmp:  # exclusive: first removes temps of killed writes
        tmp.mkdir()
        torch.save(
            {
                "modules": {k: m.state_dict() for k, m in modules.items()},
                "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
                "rng": rng_state(),
            },
            tmp / WEIGHTS,
        )
        (tmp / STATE).write_text(json.dumps({"step": step, **state}, indent=1), encoding="utf-8")
        (tmp / SUMS).write_text("".join(f"{_sha256(tmp / n)}  {n}\n" for n in (WEIGHTS, STATE)), encoding="utf-8")
    others = sorted(d for d in root.iterdir() if _DIR.match(d.name) and d != target)
    for old in others[: max(0, len(others) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_latest(root: Path, modules: dict[str, torch.nn.Module],
                optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any] | None:  # fmt: skip
    """Load the newest checkpoint that verifies and loads; warn for each damaged one skipped. None when there is none."""
    bad: list[str] = []
    for path in all_checkpoints(root, finished=False):
        problem = verify(path)
        if problem is None:
            try:
                state = load(path, modules, optimizers)
            except Exception as err:  # verified yet unloadable: written by other code, or damaged before hashing
                problem = f"{path}: does not load ({type(err).__name__}: {str(err)[:200]})"
            else:
                if bad:
                    warnings.warn(f"resuming from the older checkpoint {path}", stacklevel=2)
                return state
        warnings.warn(f"skipping a damaged checkpoint: {problem}", stacklevel=2)
        bad.append(problem)
    if bad:
        raise CheckpointError(
            f"no usable checkpoint under {root}:\n  " + "\n  ".join(bad) + f"\nRestore them from a backup, or "
            f"delete {root} to train again from step 0."
        )
    return None


def load(path: Path, modules: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """Read everything first, then apply: a file that does not parse leaves the modules untouched."""
    state = json.loads((path / STATE).read_text(encoding="utf-8"))
    blob = torch.load(path / WEIGHTS, map_location="cpu", weights_only=False)
    for k, m in modules.items():
        m.load_state_dict(blob["modules"][k])
    for k, o in optimizers.items():
        o.load_state_dict(blob["optimizers"][k])
    set_rng_state(blob["rng"])
    return state
