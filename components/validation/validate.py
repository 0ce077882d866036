"""The `validate` stage: Great Expectations suites over the prepared questions and passages.

Reads  artifacts/prepared/{questions,passages}.parquet
Writes artifacts/validation/report/        GX data docs (index.html) + summary.json, on success and on failure
       artifacts/validation/summary.json   per-suite results and metrics, only on success (the DVC-tracked output)
A failing suite raises ValidationFailed naming each failing expectation, its column and example rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from components import artifacts
from components.config import Config, ValidationConfig
from components.data.schema import DataError
from components.io import atomic_path, remove, write_json
from components.tracking.tracker import Tracker
from components.validation.coverage import answer_coverage
from components.validation.derive import PASSAGE_COLUMNS, QUESTION_COLUMNS, answers_frame, questions_frame
from components.validation.gx_run import run_suites
from components.validation.results import ValidationFailed, failure_message, suite_summary
from components.validation.suites import all_suites

__all__ = ["ValidationFailed", "Outcome", "validate_frames", "run"]


@dataclass(frozen=True)
class Outcome:
    success: bool
    suites: dict[str, dict[str, Any]]
    metrics: dict[str, float]

    @property
    def summary(self) -> dict[str, Any]:
        return {"success": self.success, "suites": self.suites, "metrics": self.metrics}


def read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: not a readable Parquet file: {err}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    return df


def validate_frames(
    questions: pd.DataFrame, passages: pd.DataFrame, v: ValidationConfig, docs_dir: Path | None = None
) -> Outcome:
    """Run every suite on in-memory tables; with `docs_dir`, write the GX data docs there."""
    q = questions_frame(questions, passages, v.eval_splits)
    frames = {"questions": q, "answers": answers_frame(q), "passages": passages.reset_index(drop=True)}
    results = run_suites(frames, all_suites(v), v.n_examples, docs_dir)
    suites = {name: suite_summary(r, v.n_examples) for name, r in results.items()}
    metrics: dict[str, float] = {
        "n_questions": float(len(q)),
        "n_passages": float(len(passages)),
        "expectations_failed": float(sum(len(s["failed"]) for s in suites.values())),
        **answer_coverage(q, passages),
    }
    return Outcome(all(s["success"] for s in suites.values()), suites, metrics)


def run(cfg: Config, tracker: Tracker) -> dict[str, float]:
    summary_path, report_dir = artifacts.validation_summary(cfg), artifacts.validation_report(cfg)
    remove(summary_path)  # a stale pass must not outlive a failing run
    q_path, p_path = artifacts.require(cfg, artifacts.questions(cfg)), artifacts.require(cfg, artifacts.passages(cfg))
    questions, passages = read_table(q_path, QUESTION_COLUMNS), read_table(p_path, PASSAGE_COLUMNS)
    tracker.log_input(q_path, "validation")
    tracker.log_input(p_path, "validation")

    start = time.perf_counter()
    with atomic_path(report_dir) as tmp:
        outcome = validate_frames(questions, passages, cfg.validation, docs_dir=tmp)
        write_json(tmp / "summary.json", outcome.summary)
    seconds = time.perf_counter() - start
    metrics = {**outcome.metrics, "validate_rows_per_s": (len(questions) + len(passages)) / seconds}
    tracker.log_artifact(report_dir, "validation_report")
    if not outcome.success:
        tracker.log_metrics(metrics)
        tracker.set_tags({"validation": "failed"})
        raise ValidationFailed(failure_message(outcome.suites, str(report_dir / "index.html")))
    # The throughput goes to MLflow only: in the DVC-tracked summary it would change on every run and make
    # every stage that reads the summary re-run.
    write_json(summary_path, {**outcome.summary, "metrics": outcome.metrics})
    return metrics
