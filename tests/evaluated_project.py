"""A small real project after train + evaluate (tiny model, synthetic world, real MLflow sqlite store), shared by
the report, traces and progress tests: one run per test session."""

from pathlib import Path

import pytest
import yaml

import components.data.prepare as prepare
import components.model.base_model as base_model
import components.retrieval.index as index
from components.config import load_config
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


@pytest.fixture(scope="session")
def evaluated(tmp_path_factory):
    """A project dir (params.yaml, mlflow.db) after a real train + evaluate; yields (project, cfg)."""
    project = tmp_path_factory.mktemp("proj")
    (project / "params.yaml").write_text(yaml.safe_dump(small_params(project / "artifacts")))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
        cfg = load_config(project / "params.yaml")
        for stage in (prepare, index, base_model):
            stage.run(cfg, NullTracker())
        run_stage("train", cfg)
        run_stage("evaluate", cfg)
        yield project, cfg
