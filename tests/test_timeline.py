"""The suite's timeline (tests/timeline.py): a test's wall time, and the CPU of its process and of the children it
waited for."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.timeline import ENV, summary

ROOT = Path(__file__).resolve().parents[1]

BUSY_AND_WAITING = """
import subprocess, sys, time

def test_busy():
    subprocess.run([sys.executable, "-c", "x = 0\\nfor i in range(3_000_000): x += i"], check=True)

def test_waiting():
    time.sleep(1.5)
"""


def test_each_test_gets_its_wall_time_and_the_cpu_of_the_children_it_waited_for(tmp_path):
    (tmp_path / "test_sample.py").write_text(BUSY_AND_WAITING)
    log = tmp_path / "timeline.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run is not a worker
    env.update({ENV: str(log), "PYTHONPATH": str(ROOT)})
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.timeline", "-p", "no:cacheprovider",
                          str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["test"].split("::")[1]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(rows) == {"test_busy", "test_waiting"} and {r["worker"] for r in rows.values()} == {"main"}
    busy, waiting = rows["test_busy"], rows["test_waiting"]
    assert busy["cpu_s"] > 0.1 and busy["cpu_s"] <= busy["end"] - busy["start"] + 0.05  # the child's loop counts
    assert waiting["end"] - waiting["start"] >= 1.5 and waiting["cpu_s"] < 0.5
    text = summary(list(rows.values()))
    assert "test_sample.py" in text and "\nmain " in text


def test_summary_lists_the_tests_that_mostly_wait():
    rows = [{"worker": "gw0", "test": "tests/test_a.py::test_x", "start": 0.0, "end": 20.0, "cpu_s": 19.0},
            {"worker": "gw1", "test": "tests/test_b.py::test_y", "start": 0.0, "end": 30.0, "cpu_s": 2.0}]
    text = summary(rows)
    waits = text.split("wait more than 5 s")[1]
    assert "tests/test_b.py::test_y" in waits and "test_a.py" not in waits
    assert "    30.0      2.0      1  tests/test_b.py" in text
