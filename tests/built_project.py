"""One TINY_TRAINING project built by the Prefect flow (ephemeral mode, as a user runs `python -m flows.pipeline`), once per
test session; each test works on its own copy (tests/project.py copy_built)."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    project = make_project(tmp_path_factory.mktemp("built") / "p", TINY_TRAINING)
    out = run([sys.executable, "-m", "flows.pipeline"], project)
    return Built(project, out.stdout + out.stderr)
