"""components/evaluation/profile_report.py (`agentr1 profile-report`): the comparison of the trained agent with the baselines: paired bootstrap over questions,
per set and, for the synthetic world, per number of hops."""

from __future__ import annotations

import json

from components.evaluation import machine
from components.evaluation import profile_report
from tests.conftest import ROOT


def test_paired_bootstrap_brackets_the_mean_difference():
    d, lo, hi = profile_report.paired_bootstrap([1, 1, 1, 0] * 25, [0, 1, 0, 0] * 25)
    assert d == 0.5 and lo < 0.5 < hi and lo > 0.3 and hi < 0.7
    assert profile_report.paired_bootstrap([1, 0] * 10, [1, 0] * 10) == (0.0, 0.0, 0.0)  # identical systems


def test_comparisons_pair_questions_and_split_the_synthetic_world_by_hops(tmp_path):
    rows = []
    for i in range(20):
        question = "Who is the rival of Bo?" if i < 10 else "Who is the rival of the teacher of Bo?"
        for system, em in (("agent", float(i < 10)), ("base_agent", 0.0), ("naive_rag", float(i % 2))):
            rows.append({"system": system, "set": "synthetic/dev", "question_id": f"q{i}", "question": question, "em": em,
                         "f1": 1.0 if system == "agent" else em})  # fmt: skip
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(map(json.dumps, rows)))
    table = profile_report.comparisons(profile_report.read_predictions(path), ["synthetic/dev"])
    assert table[2].startswith("| synthetic/dev all | 20 | +0.500 [")
    assert table[3].startswith("| synthetic/dev 1-hop | 10 | +1.000 [+1.000, +1.000] | +0.500 [")
    assert table[4].startswith("| synthetic/dev 2-hop | 10 | +0.000 [+0.000, +0.000] | -0.500 [")
    assert table[4].endswith("| +1.000 [+1.000, +1.000] | +0.500 [+0.200, +0.800] |")  # F1: the agent's is 1 throughout


def test_wins_and_losses_list_the_questions_where_the_agent_and_naive_rag_differ(tmp_path):
    rows = []
    for i in range(30):
        agent, naive = float(i % 3 == 0), float(i % 3 == 1)  # 10 wins, 10 losses, 10 ties
        rows += [{"system": "agent", "set": "hotpotqa/dev", "question_id": f"q{i}", "question": f"Q{i} a|b?",
                  "answers": [f"gold{i}"], "prediction": f"agent{i}", "searches": 2, "em": agent},
                 {"system": "naive_rag", "set": "hotpotqa/dev", "question_id": f"q{i}", "question": f"Q{i} a|b?",
                  "answers": [f"gold{i}"], "prediction": None, "searches": 0, "em": naive}]  # fmt: skip
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(map(json.dumps, rows)))
    lines = profile_report.wins_and_losses(profile_report.read_predictions(path), "hotpotqa/dev", n=4)
    assert lines[0] == "### hotpotqa/dev: the agent beats naive_rag (10 of 30 questions; the first 4)"
    assert lines[4] == "| Q0 a\\|b? | gold0 | agent0 (2) | None |" and lines[8] == ""  # "|" escaped; 4 rows
    losses_at = next(i for i, line in enumerate(lines) if "loses to naive_rag (10 of 30" in line)
    assert [line.split(" |")[0] for line in lines[losses_at + 4: losses_at + 8]] == ["| Q1 a\\|b?", "| Q4 a\\|b?", "| Q7 a\\|b?", "| Q10 a\\|b?"]


def test_the_report_names_the_profile_its_model_and_the_gpu(tmp_path, monkeypatch):
    import sys

    import pytest
    import torch

    from components.cli import main

    gpu = machine.gpu_line()
    if torch.cuda.is_available():
        assert gpu.startswith("; GPU: " + torch.cuda.get_device_name())
    else:
        assert gpu == ""
    out = tmp_path / "report.md"
    monkeypatch.chdir(tmp_path)  # the report must not depend on the working directory
    argv = ["agentr1", "profile-report", "--params", str(ROOT / "params.yaml"), "--stages", "", "--out", str(out),
            "-S", "profile=qwen", "-S", f"project.artifacts_dir={tmp_path / 'art'}"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    heading, _, machine_line = out.read_text().splitlines()[:3]
    assert heading.startswith("# Profile qwen (qwen2.5-coder-0.5b-instruct-q4_k_m.gguf), ")
    assert machine_line.startswith(f"Machine: {machine.cpu_line()}, torch threads from train.num_threads{gpu}. ")


def test_each_sets_heading_counts_the_questions_it_holds_and_the_agent_shows_what_its_searches_found(tmp_path):
    """A set smaller than its limit (2Wiki's 104 dev questions under the default 200) is headed by its own count."""
    from components import artifacts
    from components.config import load_config

    cfg = load_config(ROOT / "params.yaml", {"profile": "qwen", "project.artifacts_dir": str(tmp_path / "art"),
                                             "evaluate.sets": [{"dataset": "hotpotqa"}, {"dataset": "2wiki"}]})  # fmt: skip
    metrics = {"em": 0.5, "f1": 0.5, "answered": 1.0, "yes_no": 0.0, "searches": 1.0, "support_recall": 0.75, "turns": 2.0}
    report = {m: {d: {"dev": v} for d in ("hotpotqa", "2wiki")} for m, v in metrics.items()}
    artifacts.eval_metrics(cfg).parent.mkdir(parents=True)
    artifacts.eval_metrics(cfg).write_text(json.dumps(report))
    rows = [{"system": "agent", "set": s, "question_id": f"q{i}", "question": "Who?", "answers": ["x"], "prediction": "x",
             "searches": 1, "em": 1.0, "f1": 1.0} for s, n in (("hotpotqa/dev", 200), ("2wiki/dev", 104)) for i in range(n)]  # fmt: skip
    artifacts.eval_predictions(cfg).parent.mkdir(parents=True)
    artifacts.eval_predictions(cfg).write_text("\n".join(map(json.dumps, rows)))
    lines = profile_report.write(cfg, {"profile": "qwen"}, {}, tmp_path / "report.md")
    assert "## hotpotqa/dev (first 200 questions)" in lines and "## 2wiki/dev (first 104 questions)" in lines
    assert "| agent | 0.500 | 0.500 | 1.00 | 0.00 | 1.00 | 0.75 | 2.00 |  |" in lines
