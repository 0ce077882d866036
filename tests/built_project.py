"""One TINY_TRAINING project built by the Prefect flow (ephemeral mode, as a user runs `python -m flows.pipeline`), once per
test session, shared by the xdist workers; each test works on its own copy (tests/project.py copy_built)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.project import TINY_TRAINING, copy_built, make_project, run


@dataclass(frozen=True)
class Built:
    path: Path
    flow_output: str  # the building flow run's stdout + stderr

    def copy(self, dest: Path) -> Path:
        return copy_built(self.path, dest)


def session_dir(tmp_path_factory) -> Path:
    """The test run's own temp dir: under xdist the workers' common parent, else this process's base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    """Built by the first worker that needs it; a second one waits on the lock, then reads the same project."""
    root = session_dir(tmp_path_factory) / "built"
    root.mkdir(exist_ok=True)
    project, output = root / "p", root / "flow_output.txt"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not output.exists():  # not built yet, or a failed build: start again from nothing
            shutil.rmtree(project, ignore_errors=True)
            out = run([sys.executable, "-m", "flows.pipeline"], make_project(project, TINY_TRAINING))
            output.write_text(out.stdout + out.stderr)
    return Built(project, output.read_text())
