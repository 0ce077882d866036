"""Where the suite's time goes: with AGENTR1_TIMELINE=<file>, each test appends one JSON line (worker, node id, start,
end, CPU seconds of the test process and of the child processes it waited for). `python -m tests.timeline <file>`
sums it per worker and per module, and lists the tests that mostly wait (docs/testing.md)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

import pytest

ENV = "AGENTR1_TIMELINE"


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(ENV)
    start, cpu = time.time(), _cpu_s()
    yield
    if path:
        row = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid, "start": start,
               "end": time.time(), "cpu_s": _cpu_s() - cpu}  # fmt: skip
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def summary(rows: list[dict]) -> str:
    t0 = min(r["start"] for r in rows)
    lines = ["worker  ends at (s)  in tests (s)  CPU (s)"]
    for w in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == w]
        busy = sum(r["end"] - r["start"] for r in mine)
        lines.append(f"{w:6}  {max(r['end'] for r in mine) - t0:11.0f}  {busy:12.0f}  {sum(r['cpu_s'] for r in mine):7.0f}")
    per = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        m = per[r["test"].split("::")[0]]
        m[0], m[1], m[2] = m[0] + r["end"] - r["start"], m[1] + r["cpu_s"], m[2] + 1
    lines += ["", "wall (s)  CPU (s)  tests  module"]
    lines += [f"{w:8.1f}  {c:7.1f}  {n:5d}  {m}" for m, (w, c, n) in sorted(per.items(), key=lambda kv: -kv[1][0])]
    waiting = [r for r in rows if r["end"] - r["start"] - r["cpu_s"] > 5]
    lines += ["", "tests that wait more than 5 s (a server, a sleep, or a process they do not wait for):"]
    lines += [f"{r['end'] - r['start']:8.1f}  {r['cpu_s']:7.1f}  {r['test']}"
              for r in sorted(waiting, key=lambda r: r["cpu_s"] - r["end"] + r["start"])]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary([json.loads(line) for line in open(sys.argv[1])]))
