"""A fresh, small copy of the project in a temp dir, for end-to-end tests (git-tracked files + the raw data), and
what those tests share: the small configs, the stage graph, and DVC's log lines."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import yaml

from components.config import set_dotted

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# CPU-minutes, not hours: the same stages on less data and fewer steps.
SMALL = {
    "data.datasets": [
        {"name": "hotpotqa", "format": "hotpotqa_ircot", "path": "hotpotqa/dev_distractor_ircot_300.jsonl", "split": "dev", "limit": 40},
        {"name": "kilt", "format": "kilt", "path": "wiki/kilt_sample_100_pages.jsonl", "limit": 10},
    ],
    "data.synthetic.n_entities": 60,
    "data.synthetic.n_train": 100,
    "data.synthetic.n_dev": 20,
    "data.synthetic.n_test": 20,
    "tracking.traces": 1,  # the trace path runs; test_eval_report checks the traces themselves
    "train.num_threads": 1,  # one core per xdist worker (tests/conftest.py)
    "model.tiny.num_threads": 1,
}


# Small pipeline projects for the end-to-end tests (DVC, Prefect).
ALL_STAGES = ["prepare", "validate", "index", "retrieval_eval", "base_model", "train", "evaluate", "register"]
DATA_STAGES = ALL_STAGES[:4]
# The whole pipeline in seconds: a few priming and RL steps, three small eval sets, every baseline.
TINY_TRAINING = {
    "model.tiny.priming.first_turn_steps": 2,
    "model.tiny.priming.steps": 2,
    "model.tiny.priming.batch_size": 4,
    "model.tiny.priming.probes": 4,
    "train.steps": 2,
    "train.eval_every": 0,
    "train.questions_per_step": 4,
    "train.group_size": 2,
    "evaluate.sets": [
        {"dataset": "synthetic", "split": "dev", "limit": 10},
        {"dataset": "synthetic_cf", "split": "dev", "limit": 10},
        {"dataset": "hotpotqa", "split": "dev", "limit": 5},
    ],
    # 2 RL steps leave the agent level with its baselines: the champion gate (tests/test_gate.py) would keep the
    # champion empty, and these projects test what happens around a champion
    "registry.baselines": [],
}

FOLLOWERS = {  # every stage downstream of each, by dvc.yaml's data deps
    "prepare": {"validate", "index", "retrieval_eval", "base_model", "train", "evaluate", "register"},
    "validate": {"index", "retrieval_eval", "base_model", "train", "evaluate", "register"},
    "index": {"retrieval_eval", "base_model", "train", "evaluate", "register"},
    "retrieval_eval": set(),
    "base_model": {"train", "evaluate", "register"},
    "train": {"evaluate", "register"},
    "evaluate": {"register"},
    "register": set(),
}


def ran(output: str) -> list[str]:
    return re.findall(r"Running stage '([\w.]+)'", output)


def restored(output: str) -> list[str]:
    """Stages DVC took from its run-cache: same deps and params as an earlier run."""
    return re.findall(r"Stage '([\w.]+)' is cached - skipping run", output)


def touch(project, rel: str) -> None:
    """A real change to a module's content (a comment line): DVC sees a new hash."""
    with (project / rel).open("a") as f:
        f.write(f"# changed by a test at {time.time()}\n")


def make_project(dest: Path, overrides: dict | None = None, git: bool = True) -> Path:
    """Copy tracked files and data/ to `dest`, apply `overrides` to params.yaml, optionally `git init` + commit."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    shutil.copytree(ROOT / "data", dest / "data", dirs_exist_ok=True)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    for k, v in {**SMALL, **(overrides or {})}.items():
        set_dotted(params, k, v)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if git:
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
            subprocess.run(cmd, cwd=dest, check=True, capture_output=True)
    return dest


def env_for(project: Path) -> dict[str, str]:
    """Environment for subprocesses in the copy: its own tool state, the venv's binaries first."""
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env['PATH']}",
        PREFECT_HOME=str(project / ".prefect"),
        DVC_SITE_CACHE_DIR=str(project / ".cache" / "dvc-site"),
        PYTHONPATH=str(project),
    )
    return env


def run(cmd: list[str], project: Path, timeout: int = 900, check: bool = True, env: dict | None = None):
    out = subprocess.run(cmd, cwd=project, env=env or env_for(project), capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {out.returncode}\nstdout:\n{out.stdout[-4000:]}\nstderr:\n{out.stderr[-4000:]}")
    return out


# A built project names its own files by absolute path in MLflow's store (mlflow.db) and in each registered model.
NOT_COPIED = (".prefect", "dvc-site")  # tool state keyed by the old path; each copy starts its own


def _text_columns(db: sqlite3.Connection, table: str) -> list[str]:
    columns = db.execute(f'PRAGMA table_info("{table}")').fetchall()  # (cid, name, type, ...)
    return [c[1] for c in columns if c[2].upper() == "TEXT" or "CHAR" in c[2].upper()]


def copy_built(src: Path, dest: Path) -> Path:
    """A working copy of a built project at `dest`: every absolute path that named `src` now names `dest`."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(*NOT_COPIED))
    old, new = f"{src}/", f"{dest}/"
    with closing(sqlite3.connect(dest / "mlflow.db", isolation_level=None)) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for col in _text_columns(db, table):
                sql = f'UPDATE "{table}" SET "{col}" = replace("{col}", ?, ?) WHERE instr("{col}", ?) > 0'
                db.execute(sql, (old, new, old))
        db.execute("VACUUM")  # the old rows' bytes leave the file's free pages too
    for rel in _naming(dest, old):  # the registered models' MLmodel and agent.yaml
        (dest / rel).write_text((dest / rel).read_text().replace(old, new))
    left = _naming(dest, old, ("mlartifacts", "mlflow.db"))
    assert not left, f"{left} still name {src}"
    return dest


def _naming(project: Path, text: str, paths: tuple[str, ...] = ("mlartifacts",)) -> list[str]:
    """Files under `paths` (relative to `project`) that contain `text`."""
    out = subprocess.run(["grep", "-rlF", text, *paths], cwd=project, capture_output=True, text=True)
    return out.stdout.split()
