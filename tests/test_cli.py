"""The CLI through its real entry point (a subprocess, as DVC calls it)."""

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def agentr1(*args, cwd):
    return subprocess.run([str(BIN / "agentr1"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_lists_every_stage_in_pipeline_order(repo_root):
    from components.stages import STAGES

    out = agentr1("--help", cwd=repo_root)
    assert out.returncode == 0
    # the command column of rich's help box: "│ prepare   Load ..."
    listed = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("│ ") and line[2:3].isalpha()]
    stages = [name.replace("_", "-") for name in STAGES]
    assert listed[: len(stages)] == stages, listed
    assert {"ask", "promote", "rollback", "validate-params"} <= set(listed[len(stages):])


def test_bad_params_fail_before_work(tmp_path, repo_root):
    (tmp_path / "params.yaml").write_text("train:\n  algorithm: sarsa\n")
    out = agentr1("prepare", cwd=tmp_path)
    assert out.returncode == 1
    assert "train.algorithm" in out.stderr
    assert not (tmp_path / "artifacts").exists()
    assert not (tmp_path / "mlflow.db").exists()


def test_bad_set_override(repo_root):
    out = agentr1("validate-params", "-S", "retrieval.top_k=0", cwd=repo_root)
    assert out.returncode == 1 and "retrieval.top_k" in out.stderr


def test_a_stage_that_fails_before_running_leaves_the_collector_on(tmp_path, monkeypatch):
    import gc

    import pytest

    from components.cli import main

    (tmp_path / "params.yaml").write_text("train:\n  algorithm: sarsa\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["agentr1", "prepare"])
    assert gc.isenabled()
    with pytest.raises(SystemExit) as exit_:
        main()  # the console script, in this process
    assert exit_.value.code == 1
    assert gc.isenabled()  # the stage path turns the collector off for its imports only
