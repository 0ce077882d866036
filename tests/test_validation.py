"""validate stage: real Great Expectations 1.x suites on hand-built tables, one rule broken at a time."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from components.config import Config, ProjectConfig, ValidationConfig
from components.data.schema import DataError
from components.tracking.tracker import NullTracker
from components.validation.validate import ValidationFailed, read_table, run, validate_frames
from components.validation.derive import QUESTION_COLUMNS

V = ValidationConfig(question_max_chars=200, answer_max_chars=40, passage_max_chars=300, n_examples=3)


def clean_questions() -> pd.DataFrame:
    return pd.DataFrame(
        [
            ("q1", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"], "toy", "train", ["p1"], "wiki"),
            ("q2", "Where is the Eiffel Tower?", ["Paris"], "toy", "dev", ["p2"], "wiki"),
            ("q3", "Which band sang Yesterday?", ["The Beatles"], "toy", "test", ["p3", "p1"], "wiki"),
            ("s1", "What is the capital of Zorvia?", ["Quenby"], "synthetic", "train", ["z1"], "synthetic"),
            ("s2", "What is the river of Quenby?", ["Ulm"], "synthetic", "dev", [], "synthetic"),
        ],
        columns=list(QUESTION_COLUMNS),
    )


def clean_passages() -> pd.DataFrame:
    return pd.DataFrame(
        [
            ("p1", "Hamlet", "Hamlet is a tragedy written by William Shakespeare.", "wiki"),
            ("p2", "Eiffel Tower", "The Eiffel Tower is a tower in Paris, France.", "wiki"),
            ("p3", "Yesterday", "Yesterday is a song by the Beatles, released in 1965.", "wiki"),
            ("z1", "Zorvia", "The capital of Zorvia is Quenby.", "synthetic"),
        ],
        columns=["id", "title", "text", "corpus"],
    )


def test_clean_data_passes():
    outcome = validate_frames(clean_questions(), clean_passages(), V)
    assert outcome.success, outcome.suites
    assert set(outcome.suites) == {"questions", "answers", "passages"}
    assert all(s["evaluated"] > 0 and s["failed"] == [] for s in outcome.suites.values())
    assert outcome.metrics["n_questions"] == 5 and outcome.metrics["n_passages"] == 4


def _set(frame: pd.DataFrame, row: int, column: str, value) -> pd.DataFrame:
    frame = frame.copy()
    frame[column] = frame[column].astype(object)
    frame.at[row, column] = value
    return frame


# (name, mutate (questions, passages) -> (questions, passages), suite, expectation, column, text expected in message)
BROKEN = [
    ("null id", lambda q, p: (_set(q, 1, "id", None), p), "questions", "expect_column_values_to_not_be_null", "id", "id=None"),
    ("duplicate id", lambda q, p: (_set(q, 1, "id", "q1"), p), "questions", "expect_column_values_to_be_unique", "id", "id='q1'"),
    ("blank question", lambda q, p: (_set(q, 2, "question", "     "), p), "questions", "expect_column_values_to_not_match_regex", "question", "id='q3'"),
    ("short question", lambda q, p: (_set(q, 2, "question", "Who"), p), "questions", "expect_column_value_lengths_to_be_between", "question", "id='q3', question='Who'"),
    ("long question", lambda q, p: (_set(q, 0, "question", "why " * 60), p), "questions", "expect_column_value_lengths_to_be_between", "question", "id='q1'"),
    ("no answers", lambda q, p: (_set(q, 1, "answers", []), p), "questions", "expect_column_values_to_be_between", "n_answers", "id='q2', n_answers=0"),
    ("empty answer", lambda q, p: (_set(q, 1, "answers", ["Paris", ""]), p), "answers", "expect_column_value_lengths_to_be_between", "answer", "question_id='q2', answer=''"),
    ("long answer", lambda q, p: (_set(q, 3, "answers", ["x" * 41]), p), "answers", "expect_column_value_lengths_to_be_between", "answer", "question_id='s1'"),
    ("bad split", lambda q, p: (_set(q, 1, "split", "validation"), p), "questions", "expect_column_values_to_be_in_set", "split", "id='q2', split='validation'"),
    ("train/dev leak", lambda q, p: (_set(q, 1, "question", "who wrote  HAMLET"), p), "questions", "expect_column_values_to_be_null", "train_eval_overlap", "id='q1', train_eval_overlap='dev:q2'"),
    ("train/dev id leak", lambda q, p: (_set(q, 1, "id", "toy_dev:q1"), p), "questions", "expect_column_values_to_be_null", "train_eval_id_overlap", "id='q1', train_eval_id_overlap='dev:toy_dev:q1'"),
    ("missing support", lambda q, p: (_set(q, 2, "supporting_ids", ["p3", "p404"]), p), "questions", "expect_column_values_to_be_null", "missing_supporting_ids", "id='q3', missing_supporting_ids='p404'"),
    ("support in other corpus", lambda q, p: (_set(q, 3, "supporting_ids", ["p1"]), p), "questions", "expect_column_values_to_be_null", "missing_supporting_ids", "id='s1', missing_supporting_ids='p1'"),
    ("duplicate passage", lambda q, p: (q, _set(p, 1, "id", "p1")), "passages", "expect_compound_columns_to_be_unique", ["corpus", "id"], "id='p1'"),
    ("empty passage", lambda q, p: (q, _set(p, 2, "text", "")), "passages", "expect_column_value_lengths_to_be_between", "text", "id='p3'"),
    ("long passage", lambda q, p: (q, _set(p, 0, "text", "a" * 301)), "passages", "expect_column_value_lengths_to_be_between", "text", "id='p1'"),
    ("no questions", lambda q, p: (q.iloc[:0], p), "questions", "expect_table_row_count_to_be_between", None, "observed 0"),
]


@pytest.mark.parametrize("name,mutate,suite,expectation,column,shown", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_broken_rule_fails_with_example_rows(name, mutate, suite, expectation, column, shown):
    from components.validation.results import failure_message

    outcome = validate_frames(*mutate(clean_questions(), clean_passages()), V)
    assert not outcome.success
    failed = {(f["expectation"], json.dumps(f["column"])) for f in outcome.suites[suite]["failed"]}
    assert (expectation, json.dumps(column)) in failed
    message = failure_message(outcome.suites, "report/index.html")
    line = next(ln for ln in message.splitlines() if f"{suite}: {expectation}(" in ln and shown in ln)
    assert column is None or str(column if isinstance(column, str) else column[0]) in line


def test_leak_check_ignores_dev_test_overlap_and_normalises_text():
    q = _set(clean_questions(), 2, "question", "Where is the  Eiffel tower")  # dev and test share it: allowed
    assert validate_frames(q, clean_passages(), V).success
    q = _set(clean_questions(), 1, "question", "WHO wrote Hamlet")  # train vs dev after normalisation: leak
    assert not validate_frames(q, clean_passages(), V).success


def test_id_leak_check_ignores_dev_test_and_compares_source_ids():
    q = _set(_set(clean_questions(), 1, "id", "a:x"), 2, "id", "b:x")  # dev and test share a source id: allowed
    assert validate_frames(q, clean_passages(), V).success
    q = _set(_set(clean_questions(), 0, "id", "hotpotqa:5a7"), 1, "id", "hotpotqa_dev1025:5a7")  # train vs dev: leak
    outcome = validate_frames(q, clean_passages(), V)
    assert not outcome.success
    failed = outcome.suites["questions"]["failed"]
    assert [f["column"] for f in failed] == ["train_eval_id_overlap"]


def test_answer_coverage_on_hand_built_case():
    q = pd.DataFrame(
        [
            ("a1", "When was Yesterday released?", ["1965"], "toy", "dev", [], "wiki"),  # covered
            ("a2", "Who sang Yesterday?", ["the Beatles!"], "toy", "dev", [], "wiki"),  # covered after normalisation
            ("a3", "Which year?", ["196"], "toy", "dev", [], "wiki"),  # only a sub-token: not covered
            ("a4", "What spans?", ["France Yesterday"], "toy", "dev", [], "wiki"),  # across passages: not covered
            ("b1", "Capital of Zorvia?", ["Nowhere", "Quenby"], "syn", "dev", [], "synthetic"),  # second answer covers
            ("c1", "Unindexed?", ["Paris"], "other", "dev", [], "news"),  # corpus has no passages: not counted
        ],
        columns=list(QUESTION_COLUMNS),
    )
    m = validate_frames(q, clean_passages(), V).metrics
    assert m["answer_coverage.toy"] == pytest.approx(0.5)
    assert m["answer_coverage.syn"] == pytest.approx(1.0)
    assert "answer_coverage.other" not in m
    assert m["answer_coverage.overall"] == pytest.approx(3 / 5)


# --- the stage: files on disk ---------------------------------------------------------------------


def _prepared(tmp_path, questions: pd.DataFrame, passages: pd.DataFrame) -> Config:
    (tmp_path / "prepared").mkdir(parents=True, exist_ok=True)
    questions.to_parquet(tmp_path / "prepared" / "questions.parquet")
    passages.to_parquet(tmp_path / "prepared" / "passages.parquet")
    return Config(project=ProjectConfig(artifacts_dir=str(tmp_path)), validation=V)


def test_stage_pass_writes_summary_and_data_docs(tmp_path):
    cfg = _prepared(tmp_path, clean_questions(), clean_passages())
    metrics = run(cfg, NullTracker())
    summary = json.loads((tmp_path / "validation" / "summary.json").read_text())
    assert summary["success"] is True and summary["metrics"]["n_questions"] == metrics["n_questions"] == 5
    assert metrics["answer_coverage.overall"] == pytest.approx(4 / 5) and metrics["validate_rows_per_s"] > 0
    report = tmp_path / "validation" / "report"
    assert (report / "index.html").exists() and json.loads((report / "summary.json").read_text())["success"]
    assert len(list((report / "validations").rglob("*.html"))) == 3
    # The DVC-tracked summary is the same bytes on a re-run of the same data: what reads it does not re-run.
    first = (tmp_path / "validation" / "summary.json").read_bytes()
    run(cfg, NullTracker())
    assert (tmp_path / "validation" / "summary.json").read_bytes() == first and b"per_s" not in first


def test_stage_failure_raises_keeps_report_and_drops_summary(tmp_path):
    cfg = _prepared(tmp_path, clean_questions(), clean_passages())
    run(cfg, NullTracker())  # a previous pass leaves summary.json
    _prepared(tmp_path, _set(clean_questions(), 2, "supporting_ids", ["p404"]), clean_passages())
    with pytest.raises(ValidationFailed) as err:
        run(cfg, NullTracker())
    assert isinstance(err.value, DataError)
    assert "expect_column_values_to_be_null(column=missing_supporting_ids)" in str(err.value)
    assert "id='q3', missing_supporting_ids='p404'" in str(err.value)
    assert not (tmp_path / "validation" / "summary.json").exists()
    report = tmp_path / "validation" / "report"
    assert json.loads((report / "summary.json").read_text())["success"] is False
    html = next((report / "validations" / "questions").rglob("*.html")).read_text()
    assert "p404" in html  # the offending value is in the data docs


def test_bad_input_files_name_the_file(tmp_path):
    cfg = Config(project=ProjectConfig(artifacts_dir=str(tmp_path)), validation=V)
    with pytest.raises(FileNotFoundError, match=r"prepared/questions\.parquet: not found \(run the prepare stage first"):
        run(cfg, NullTracker())
    clean_questions().drop(columns=["answers"]).to_parquet(tmp_path / "q.parquet")
    with pytest.raises(DataError, match=r"q\.parquet: missing column\(s\) answers"):
        read_table(tmp_path / "q.parquet", QUESTION_COLUMNS)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"bad\.parquet: not a readable Parquet file"):
        read_table(tmp_path / "bad.parquet", QUESTION_COLUMNS)


def test_vectorised_normalisation_matches_official_one():
    from components.agent.rewards import normalize_answer
    from components.validation.text import normalise

    texts = ["The  Eiffel-Tower!", "an Apple a day", "Théâtre, the  BEATLES", "", "a", "  x\ty\n", "Anne's 1,965"]
    assert normalise(pd.Series(texts + [None])).tolist() == [normalize_answer(t) for t in texts] + [""]


def test_cli_validate_exits_non_zero_with_readable_message(tmp_path):
    """The real `agentr1 validate` (as DVC runs it) on a corrupted prepared table: exit 1, report kept, no summary."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _prepared(tmp_path / "artifacts", _set(clean_questions(), 1, "split", "validation"), clean_passages())
    (tmp_path / "params.yaml").write_text("project:\n  artifacts_dir: artifacts\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "agentr1"), "validate"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 1, out.stderr
    message = " ".join(out.stderr.split())  # rich wraps long lines
    assert "expect_column_values_to_be_in_set(column=split" in message and "id='q2', split='validation'" in message
    assert (tmp_path / "artifacts" / "validation" / "report" / "index.html").exists()
    assert not (tmp_path / "artifacts" / "validation" / "summary.json").exists()


def test_huge_value_is_cut_in_stderr_summary_and_data_docs(tmp_path):
    """One 50 MB question: `agentr1 validate` fails naming it, but shows only its start and its length."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    huge = "why " * 12_500_000  # 50,000,000 chars
    _prepared(tmp_path / "artifacts", _set(clean_questions(), 1, "question", huge), clean_passages())
    (tmp_path / "params.yaml").write_text("project:\n  artifacts_dir: artifacts\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "agentr1"), "validate"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(out.stderr) < 5_000, len(out.stderr)
    message = " ".join(out.stderr.split())
    assert "expect_column_value_lengths_to_be_between(column=question" in message and "id='q2'" in message
    assert "... [50,000,000 chars]" in message
    report = tmp_path / "artifacts" / "validation" / "report"
    summary = (report / "summary.json").read_text()
    assert len(summary) < 20_000 and "[50,000,000 chars]" in summary
    html = next((report / "validations" / "questions").rglob("*.html")).read_text()
    assert len(html) < 1_000_000 and "[50,000,000 chars]" in html
    assert sum(f.stat().st_size for f in report.rglob("*") if f.is_file()) < 10_000_000  # ~4.2 MB of GX assets


def test_bounded_cuts_every_string_and_keeps_the_rest():
    from components.validation.results import bounded

    obj = {"a": ["x" * 500, ("y" * 10, 3)], "k" * 300: None, "n": 1.5}
    out = bounded(obj)
    assert out["a"][0] == "x" * 200 + "... [500 chars]" and out["a"][1] == ("y" * 10, 3) and out["n"] == 1.5
    assert ("k" * 200 + "... [300 chars]") in out
