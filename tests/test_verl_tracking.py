"""verl's own MLflow logger writes into a run nested under the train stage's run (real MLflow, real verl Tracking);
the stage inputs land where the launch command points; a missing checkpoint is a clear error."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest
import yaml
from verl.utils.tracking import Tracking

from components import artifacts
from components.data.prepare import write_questions
from components.tracking.tracker import MlflowTracker
from components.train.verl import launch
from tests.verl_fixtures import QUESTIONS, make_cfg


def test_verl_logger_writes_into_a_child_of_the_stage_run(mlflow_uri, tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path)
    with mlflow.start_run() as stage:
        child = launch._child_run(cfg, MlflowTracker(stage.info.run_id))
    monkeypatch.setenv("MLFLOW_RUN_ID", child)  # what run() hands to verl's processes, with the tracking URI
    tracking = Tracking("agentr1", "agentr1-grpo", default_backend=["mlflow"], config={"trainer": {"x": 1}})
    tracking.log({"critic/score/mean": 0.25, "val-core/toyqa/acc/mean@1": 0.5, "perf/time": 3.0}, step=1)
    tracking.log({"critic/score/mean": 0.75}, step=2)
    tracking.finish()

    run = mlflow.MlflowClient().get_run(child)
    assert run.data.tags["mlflow.parentRunId"] == stage.info.run_id
    assert run.info.experiment_id == stage.info.experiment_id
    assert launch._final_metrics(child) == {"verl/critic/score/mean": 0.75, "verl/val-core/toyqa/acc/mean_at_1": 0.5}  # verl maps @

    from components.train.stage import CurveRecorder
    from components.tracking.tracker import NullTracker

    curve = CurveRecorder(NullTracker())
    launch._replay_curve(child, curve)
    assert curve.rows == {1: {"verl/critic/score/mean": 0.25, "verl/val-core/toyqa/acc/mean_at_1": 0.5},
                          2: {"verl/critic/score/mean": 0.75}}  # fmt: skip


def test_no_stage_run_means_no_child(tmp_path):
    from components.tracking.tracker import NullTracker

    assert launch._child_run(make_cfg(tmp_path), NullTracker()) is None
    assert launch._final_metrics(None) == {}


def test_write_inputs_puts_files_where_the_command_points(tmp_path):
    cfg = make_cfg(tmp_path)
    artifacts.prepared(cfg).mkdir(parents=True)
    write_questions(artifacts.questions(cfg), QUESTIONS)
    p = launch.write_inputs(cfg)
    cmd = launch.build_command(cfg)
    for key, path in [("data.train_files", p.train), ("data.val_files", p.val),
                      ("actor_rollout_ref.rollout.multi_turn.tool_config_path", p.tool_config),
                      ("actor_rollout_ref.rollout.agent.agent_loop_config_path", p.agent_loops)]:  # fmt: skip
        assert f"{key}={path}" in cmd and path.exists()
    assert len(pd.read_parquet(p.train)) == 2
    (entry,) = yaml.safe_load(p.agent_loops.read_text())
    assert entry["name"] == "agentr1_tool_agent" and entry["reward"]["invalid_call"] == cfg.agent.reward.invalid_call


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(launch.LaunchError, match="latest_checkpointed_iteration.txt: no checkpoint written"):
        launch.latest_checkpoint(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    with pytest.raises(launch.LaunchError, match="global_step_7/actor: checkpoint named by"):
        launch.latest_checkpoint(tmp_path)


def test_failed_training_run_is_a_launch_error_with_the_log_tail(mlflow_uri, tmp_path, monkeypatch):
    from components.train.verl.verl_config import VerlConfig

    cfg = make_cfg(tmp_path)
    artifacts.prepared(cfg).mkdir(parents=True)
    write_questions(artifacts.questions(cfg), QUESTIONS)
    monkeypatch.setattr(launch, "verl_config", lambda c: VerlConfig(extra_overrides=["trainer.no_such_key=1"]))
    with mlflow.start_run() as stage:
        tracker = MlflowTracker(stage.info.run_id)
        with pytest.raises(launch.LaunchError, match=r"(?s)verl training failed \(exit 1\); log .*train.log.*no_such_key"):
            launch.run(cfg, tracker)
    (child,) = mlflow.MlflowClient().search_runs(
        [stage.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{stage.info.run_id}'"
    )
    assert child.info.status == "FAILED"
    assert not (cfg.artifacts / "models" / "trained").exists()
