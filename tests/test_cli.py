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
    others = {"ask", "promote", "rollback", "validate-params", "baselines", "profile-report", "dvc-deps"}
    assert others <= set(listed[len(stages):])


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


def test_summary_shows_em_per_system_and_set_the_champion_and_where_to_look(tmp_path):
    """`make run` ends with `agentr1 summary`: read from the evaluate and register stages' files."""
    import json

    art = tmp_path / "artifacts"
    (tmp_path / "params.yaml").write_text(f"project: {{artifacts_dir: {art}}}\n")
    out = agentr1("summary", cwd=tmp_path)
    assert out.returncode == 0 and "No results yet" in out.stdout and "eval.json" in out.stdout

    (art / "metrics").mkdir(parents=True)
    (art / "eval").mkdir()
    (art / "register").mkdir()
    report = {"em": {"synthetic": {"dev": 0.98}, "synthetic_cf": {"dev": 0.95}},
              "baseline": {"direct": {"em": {"synthetic": {"dev": 0.0}, "synthetic_cf": {"dev": 0.0}}}}}  # fmt: skip
    (art / "metrics" / "eval.json").write_text(json.dumps(report))
    preds = [{"system": "agent", "set": "synthetic_cf/dev", "question": "Who is the rival of Cf?", "em": 1.0},
             {"system": "agent", "set": "synthetic/dev", "question": "Who is the mentor of Bavo?", "em": 0.0},
             {"system": "agent", "set": "synthetic/dev", "question": "Who is the rival of Kepa?", "em": 1.0}]  # fmt: skip
    (art / "eval" / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    (art / "register" / "decision.json").write_text(json.dumps(
        {"model_name": "agentr1-search-agent", "version": "2", "metric": "em/synthetic/dev", "value": 0.98,
         "champion_version": "1", "champion_value": 0.99, "promoted": False, "reason": "does not beat champion"}))  # fmt: skip
    lines = agentr1("summary", cwd=tmp_path).stdout.splitlines()
    assert lines[1].split() == ["synthetic/dev", "synthetic_cf/dev"]
    assert lines[2].split() == ["agent", "0.980", "0.950"] and lines[3].split() == ["direct", "0.000", "0.000"]
    text = "\n".join(lines)
    assert "agentr1-search-agent v2: not promoted, champion stays v1" in text
    assert str(art / "eval" / "report.html") in text and "make ui" in text
    assert 'agentr1 ask "Who is the rival of Kepa?"' in text  # a question the agent answered right, in its own world
    assert "make serve" in text and "agentr1 ask --url http://127.0.0.1:5001" in text


def test_summary_says_when_a_refused_version_leaves_no_champion(tmp_path):
    """The gate can refuse the first version: the summary says there is no champion (not "champion stays vNone")."""
    import json

    from components.config import parse_config
    from components.evaluation.summary import render

    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}})
    (cfg.artifacts / "metrics").mkdir(parents=True)
    (cfg.artifacts / "register").mkdir()
    (cfg.artifacts / "metrics" / "eval.json").write_text(json.dumps({"em": {"synthetic": {"dev": 0.07}}}))
    (cfg.artifacts / "register" / "decision.json").write_text(json.dumps(
        {"model_name": "agentr1-search-agent", "version": "1", "champion_version": None, "promoted": False,
         "reason": "em/synthetic/dev=0.0700; no champion yet; does not beat base_agent 0.1200"}))  # fmt: skip
    assert "agentr1-search-agent v1: not promoted, no champion yet (em/synthetic/dev=0.0700;" in render(cfg)
