"""Atomic training checkpoints: model, optimizer(s), RNG state, step, MLflow run id, the learning curve so far.

A checkpoint is one directory written through components.io.atomic_path, so a kill -9 leaves either the
previous checkpoint or the new one, never half of one (the next save removes the killed write's temp dir).
Non-finite weights are refused. Each checkpoint carries the SHA-256 of its files (SHA256SUMS, written last);
a damaged one (a disk fault, a truncated or half copy, a file that does not load) is skipped with a warning
for the one before it, so two are kept.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.io import atomic_path, exclusive, sha256_of
from components.rollout.traces import LINEAGE_TAG, EpisodeTrace, trace_key

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
            if sha256_of(path / name) != sums[name]:
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
    blob = {"modules": {k: m.state_dict() for k, m in modules.items()},
            "optimizers": {k: o.state_dict() for k, o in optimizers.items()}, "rng": rng_state()}  # fmt: skip
    # exclusive: first removes temps of killed writes; a full disk leaves the previous checkpoints as they were
    with exclusive(root), atomic_path(target, need=_nbytes(blob)) as tmp:
        tmp.mkdir()
        with open(tmp / WEIGHTS, "wb") as f:  # a file object: torch's error on a full disk keeps the OSError
            torch.save(blob, f)
        (tmp / STATE).write_text(json.dumps({"step": step, **state}, indent=1), encoding="utf-8")
        (tmp / SUMS).write_text("".join(f"{sha256_of(tmp / n)}  {n}\n" for n in (WEIGHTS, STATE)), encoding="utf-8")
    others = sorted(d for d in root.iterdir() if _DIR.match(d.name) and d != target)
    for old in others[: max(0, len(others) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _nbytes(obj: Any) -> int:
    """Bytes of the tensors in a nested state: about what torch.save writes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


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


def flush(tracker, pending: list[tuple[int, dict[str, Any]]]) -> None:
    """Log each (step, metrics); keys without a section go under train/, non-finite values are left out."""
    for n, metrics in pending:
        tracker.log_metrics({f"train/{k}" if "/" not in k else k: v for k, v in metrics.items()
                             if isinstance(v, (int, float)) and math.isfinite(v)}, step=n)  # fmt: skip


class TrainLog:
    """A training run's bookkeeping: checkpoints, the curve, best dev EM, and the metrics sent to the tracker.

    A step's metrics reach the tracker only after a checkpoint holds them; a resumed run first re-logs the
    checkpoint's curve. So the tracker's run holds every step exactly once, whatever point a kill -9 hit.
    A step's traces are logged when it runs, tagged with the training's lineage (its first run's id, carried by the
    checkpoints); a resumed run skips those its lineage logged already, so the store holds each step's once.
    """

    def __init__(self, root: Path, modules: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                 tracker) -> None:  # fmt: skip
        self.root, self.modules, self.optimizers, self.tracker = root, modules, optimizers, tracker
        self.start = 0
        self.curve: list[tuple[int, dict[str, Any]]] = []  # checkpointed
        self.pending: list[tuple[int, dict[str, Any]]] = []  # not yet checkpointed (nor logged)
        self.history: dict[str, Any] = {"best_em": None, "best_step": None, "best_eval": {}, "steps_to_target": None}
        self.lineage: str | None = tracker.run_id
        self.logged: set[str] | None = set()  # trace keys the lineage logged; None until read from the store

    def resume(self) -> int:
        """Load the latest usable checkpoint into the modules and optimizers; the step to start from."""
        state = load_latest(self.root, self.modules, self.optimizers)
        if state is not None:
            self.start, self.curve, self.history = state["step"], state["curve"], state["history"]
            self.lineage, self.logged = state.get("lineage") or state["run_id"] or self.lineage, None
            flush(self.tracker, self.curve)
            self.tracker.set_tags({"resumed_from_step": str(self.start), "resumed_from_run": str(state["run_id"])})
        return self.start

    def log_traces(self, n: int, episodes: list[EpisodeTrace]) -> None:
        """Step n's episodes as traces, but for those this training's runs logged already (before a kill)."""
        if not episodes:
            return
        if self.logged is None:
            self.logged = {trace_key(t) for t in self.tracker.trace_tags(LINEAGE_TAG, self.lineage)} if self.lineage else set()
        tags = {LINEAGE_TAG: self.lineage} if self.lineage else {}
        new = [replace(e, tags={**e.tags, **tags}) for e in episodes if trace_key(e.tags) not in self.logged]
        if new:
            self.tracker.log_traces(new, f"train/step {n}")
            self.logged |= {trace_key(e.tags) for e in new}

    def dev_em(self, n: int, em: float | None, target: float | None, evaluation: dict[str, float]) -> bool:
        """Note held-out dev EM after step n: the best so far (and its step and evaluation), and the first step that
        reached `target`. True when step n is the new best (the first evaluation is)."""
        if em is None:
            return False
        best = self.history["best_em"] is None or em > self.history["best_em"]
        if best:
            self.history.update(best_em=em, best_step=n, best_eval=dict(evaluation))
        if target is not None and em >= target and self.history["steps_to_target"] is None:
            self.history["steps_to_target"] = n
        return best

    def last_eval(self) -> dict[str, float]:
        """The dev metrics of the curve's last evaluated step ({} when none)."""
        evals = [{k: v for k, v in m.items() if k.startswith("dev/")} for _, m in self.curve]
        return next((e for e in reversed(evals) if e), {})

    @property
    def reached_target(self) -> bool:
        return self.history["steps_to_target"] is not None

    def record(self, n: int, metrics: dict[str, Any]) -> None:
        self.pending.append((n, metrics))

    def checkpoint(self, n: int) -> None:
        """Save step n with the curve so far, then log the steps it newly holds."""
        self.curve += self.pending
        save(self.root, n, self.modules, self.optimizers,
             {"run_id": self.tracker.run_id, "lineage": self.lineage, "history": self.history, "curve": self.curve})  # fmt: skip
        flush(self.tracker, self.pending)
        self.pending = []

    def close(self) -> None:
        """Log what no checkpoint holds (the step-0 evaluation when no step ran)."""
        flush(self.tracker, self.pending)
        self.pending = []

    def steps_done(self) -> int:
        last = latest(self.root)
        return int(last.name.split("-")[1]) if last is not None else self.start
