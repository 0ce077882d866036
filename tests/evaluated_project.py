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

SYSTEMS = ["agent", "direct", "naive_rag", "base_agent"]
SETS = ["synthetic/dev", "synthetic_cf/dev"]
TRACES = 3


def small_params(art: Path) -> dict:
    return {
        "project": {"seed": 3, "artifacts_dir": str(art)},
        "data": {"datasets": [], "synthetic": {"seed": 7, "n_entities": 40, "n_relations": 4, "n_train": 60,
                                               "n_dev": 10, "n_test": 10}},  # fmt: skip
        "agent": {"system_prompt": False, "max_turns": 3, "max_tokens_per_turn": 12},
        "model": {"tiny": {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 1, "prime_first_turn_steps": 3,
                           "prime_steps": 3, "prime_batch_size": 4, "prime_probes": 8}},
        "train": {"steps": 2, "questions_per_step": 2, "group_size": 3, "micro_batch_size": 4, "eval_every": 2,
                  "eval_questions": 4, "checkpoint_every": 2},
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
