"""A small real project after train + evaluate (tiny model, synthetic world, real MLflow sqlite store), shared by
the report, traces and progress tests: one run per test session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import components.data.prepare as prepare
import components.base_model.base_model as base_model
import components.retrieval.index as index
from components.config import Config, load_config
from components.stages import run_stage
from components.tracking.tracker import NullTracker
from tests.toy import small_raw

SYSTEMS = ["agent", "direct", "naive_rag", "base_agent"]
SETS = ["synthetic/dev", "synthetic_cf/dev"]
TRACES = 3


def small_params(art: Path) -> dict:
    raw = small_raw(art, steps=2)
    del raw["train"]["log_trajectories_every"]
    return raw | {
        "evaluate": {"sets": [{"dataset": "synthetic", "split": "dev", "limit": 8},
                              {"dataset": "synthetic_cf", "split": "dev", "limit": 8}],
                     "baselines": SYSTEMS[1:], "report_trajectories": 100},
        "tracking": {"traces": TRACES},
    }  # fmt: skip


@dataclass(frozen=True)
class Evaluated:
    root: Path  # the project: params.yaml, artifacts/, mlflow.db
    cfg: Config

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"


@contextmanager
def inside(project: Path, uri: str) -> Iterator[None]:
    """The working directory is `project` and MLflow's store `uri` within the block; both are as before after it."""
    from mlflow.tracking._tracking_service import utils

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr(utils, "_tracking_uri", utils._tracking_uri)  # the stages' mlflow.set_tracking_uri is undone too
        yield


@pytest.fixture(scope="session")
def evaluated(tmp_path_factory) -> Evaluated:
    """A project after a real train + evaluate. Its tests name its files by `root`: the process's working directory
    and MLflow store stay the session's."""
    root = tmp_path_factory.mktemp("proj")
    (root / "params.yaml").write_text(yaml.safe_dump(small_params(root / "artifacts")))
    done = Evaluated(root, load_config(root / "params.yaml"))
    with inside(root, done.uri):
        for stage in (prepare, index, base_model):
            stage.run(done.cfg, NullTracker())
        run_stage("train", done.cfg)
        run_stage("evaluate", done.cfg)
    return done
