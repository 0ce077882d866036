"""components/evaluation/baseline_table.py (`agentr1 baselines`): the pieces that decide what a reader sees (the EM
interval and the section it replaces), --resume, and the command's options."""

from __future__ import annotations

import json

import pytest

from components.evaluation import baseline_table as baselines


@pytest.mark.parametrize("k,n", [(0, 8), (2, 8), (8, 8), (57, 300), (150, 300)])
def test_wilson_interval(k, n):
    lo, hi = baselines.wilson(k, n)
    p, z = k / n, 1.96
    assert 0 <= lo <= p <= hi <= 1
    for bound in (lo, hi):  # each bound solves the score equation |p - b| = z * sqrt(b (1 - b) / n)
        if 0 < bound < 1:
            assert abs(p - bound) == pytest.approx(z * (bound * (1 - bound) / n) ** 0.5, abs=1e-9)
    assert (lo == 0) == (k == 0) and (hi == 1) == (k == n)


def test_wilson_narrows_with_more_questions():
    assert baselines.wilson(60, 300)[1] - baselines.wilson(60, 300)[0] < baselines.wilson(8, 40)[1] - baselines.wilson(8, 40)[0]


def test_section_is_replaced_in_place_and_the_rest_kept(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n", encoding="utf-8")
    baselines.replace_section(doc, "qwen", ["## qwen", "old"])
    baselines.replace_section(doc, "real", ["## real"])
    baselines.replace_section(doc, "qwen", ["## qwen", "new"])
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nintro\n") and "old" not in text and text.count("## qwen") == 1
    assert text.index("## qwen") < text.index("## real")  # replaced where it was


def _meta(**kw):
    head = baselines.commit()
    return {"machine": "CPU X, 2 torch thread(s)", "settings": "agentr1 baselines --profile qwen --full",
            "commits": [head], "seconds": 0.0} | kw  # fmt: skip


IDS = {"hotpotqa/dev": ["q1", "q2"]}


def _raw(tmp_path, meta):
    raw = tmp_path / "baselines-qwen.json"
    cell = {"em": 0.5, "n": 2, "results": [{"id": "q1"}, {"id": "q2"}]}
    raw.write_text(json.dumps({"meta": meta | {"seconds": 90.0}, "sets": {"hotpotqa/dev": {"direct": cell}}}))
    return raw


def test_resume_keeps_the_cells_of_the_same_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the checkout's commit, not the working directory's
    if "+dirty" in baselines.commit() or baselines.commit() == "nogit":
        pytest.skip("needs a clean git checkout")  # a resume refuses uncommitted code
    meta = _meta()
    sets = baselines.resumed(_raw(tmp_path, _meta()), meta, IDS)
    assert sets["hotpotqa/dev"]["direct"]["em"] == 0.5
    assert meta["seconds"] == 90.0 and meta["commits"] == [baselines.commit()]  # the time measured before counts


@pytest.mark.parametrize("key,value", [("machine", "CPU Y, 2 torch thread(s)"),
                                       ("settings", "agentr1 baselines --profile qwen --limit 50")])  # fmt: skip
def test_resume_refuses_another_machine_or_settings(tmp_path, key, value):
    with pytest.raises(SystemExit, match=f"measured with {key}"):
        baselines.resumed(_raw(tmp_path, _meta(**{key: value})), _meta(), IDS)


def test_resume_refuses_other_evaluation_code_and_a_file_of_another_shape(tmp_path):
    with pytest.raises(SystemExit, match="evaluation code"):
        baselines.resumed(_raw(tmp_path, _meta(commits=["0000000"])), _meta(), IDS)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"hotpotqa/dev": {}}))  # the format before --resume: no meta
    with pytest.raises(SystemExit, match="not a results file"):
        baselines.resumed(old, _meta(), IDS)


def test_resume_refuses_cells_measured_on_other_questions(tmp_path):
    if "+dirty" in baselines.commit() or baselines.commit() == "nogit":
        pytest.skip("needs a clean git checkout")  # otherwise it stops earlier, at the code check
    with pytest.raises(SystemExit, match="direct on hotpotqa/dev was measured on other questions"):
        baselines.resumed(_raw(tmp_path, _meta()), _meta(), {"hotpotqa/dev": ["q1", "q3"]})


def test_the_command_passes_its_options_and_splits_systems(monkeypatch):
    import sys

    from components.cli import main

    got = []
    monkeypatch.setattr(baselines, "run", lambda *a: got.append(a))
    monkeypatch.setattr(sys, "argv", ["agentr1", "baselines", "--profile", "real", "--limit", "5", "-S", "agent.max_turns=3",
                                      "--systems", "direct,naive_rag", "--systems", "base_agent", "--resume"])  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    profile, _, set_, limit, full, systems, *_, resume = got[0]
    assert (profile, set_, limit, full, systems, resume) == ("real", ["agent.max_turns=3"], 5, False,
                                                              ["direct", "naive_rag", "base_agent"], True)  # fmt: skip


def test_set_values_read_as_every_other_command_reads_them(tmp_path):
    """`-S model.warmup.cold_start_lr=5e-6` is a number here as in `agentr1 profile-report` (YAML 1.2 floats): the
    run gets past its settings and stops at the missing prepared data."""
    from components.artifacts import MissingArtifact
    from tests.conftest import ROOT

    with pytest.raises(MissingArtifact, match=r"questions\.parquet: not found"):
        baselines.run("qwen", ROOT / "params.yaml", ["model.warmup.cold_start_lr=5e-6", f"project.artifacts_dir={tmp_path}"])
