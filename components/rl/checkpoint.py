"""Atomic training checkpoints: model, optimizer(s), RNG state, step, MLflow run id, the learning curve so far.

A checkpoint is one directory written through components.io.atomic_path, so a kill -9 leaves either the
previous checkpoint or the new one, never half of one. Non-finite weights are refused.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.io import atomic_path

_DIR = re.compile(r"^step-(\d{8})$")
STATE = "state.json"


class NonFiniteCheckpoint(RuntimeError):
    """Refusing to write a checkpoint whose weights contain NaN or inf."""


def latest(root: Path) -> Path | None:
    if not root.is_dir():
        return None
    done = [d for d in root.iterdir() if _DIR.match(d.name) and (d / STATE).is_file()]
    return max(done, key=lambda d: d.name) if done else None


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
         state: dict[str, Any], keep: int = 1) -> Path:  # fmt: skip
    for name, m in modules.items():
        for pname, p in m.named_parameters():
            if not torch.isfinite(p).all():
                raise NonFiniteCheckpoint(f"{name}.{pname} has non-finite values at step {step}")
    target = root / f"step-{step:08d}"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        torch.save(
            {
                "modules": {k: m.state_dict() for k, m in modules.items()},
                "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
                "rng": rng_state(),
            },
            tmp / "weights.pt",
        )
        (tmp / STATE).write_text(json.dumps({"step": step, **state}, indent=1), encoding="utf-8")
    others = sorted(d for d in root.iterdir() if _DIR.match(d.name) and d != target)
    for old in others[: max(0, len(others) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load(path: Path, modules: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    blob = torch.load(path / "weights.pt", map_location="cpu", weights_only=False)
    for k, m in modules.items():
        m.load_state_dict(blob["modules"][k])
    for k, o in optimizers.items():
        o.load_state_dict(blob["optimizers"][k])
    set_rng_state(blob["rng"])
    return json.loads((path / STATE).read_text(encoding="utf-8"))
