"""The train stage's curves: every metric per step (curve.csv) and the dev EM plot (dev_curve.csv)."""

from __future__ import annotations

import csv
import io

from components.tracking.tracker import NullTracker
from components.train.stage import CurveRecorder


def test_dev_curve_keeps_only_evaluated_steps_with_the_target_set_first():
    curve = CurveRecorder(NullTracker())
    curve.log_metrics({"dev/hotpotqa/em": 0.0, "dev/hotpotqa/f1": 0.1, "dev/2wiki/em": 0.5}, step=0)
    curve.log_metrics({"reward": 0.3, "loss": 1.0}, step=1)
    curve.log_metrics({"reward": 0.4, "dev/hotpotqa/em": 0.25, "dev/hotpotqa/f1": 0.4, "dev/2wiki/em": 0.75}, step=2)
    rows = list(csv.DictReader(io.StringIO(curve.dev_csv("hotpotqa"))))
    assert [(r["step"], r["em"], r["f1"], r["mean_em"]) for r in rows] == [
        ("0", "0.0", "0.1", "0.25"), ("2", "0.25", "0.4", "0.5")]  # fmt: skip
    all_steps = list(csv.DictReader(io.StringIO(curve.csv())))
    assert [r["step"] for r in all_steps] == ["0", "1", "2"] and all_steps[1]["dev/hotpotqa/em"] == ""


def test_dev_curve_of_a_set_that_was_not_evaluated_is_blank_not_zero():
    curve = CurveRecorder(NullTracker())
    curve.log_metrics({"dev/synthetic/em": 1.0}, step=4)
    (row,) = csv.DictReader(io.StringIO(curve.dev_csv("hotpotqa")))
    assert row["em"] == "" and row["mean_em"] == "1.0"
