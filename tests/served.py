"""Helpers for the tests that start real servers (mlflow models serve, mlflow server) over the primed tiny agent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from components.config import Config, parse_config
from components.data.schema import Passage
from components.data.synthetic import generate_world
from components.retrieval.embedded import EmbeddedBackend

PRIMED = sorted((Path(__file__).parent / "fixtures" / "primed").iterdir())[-1]
NAME = "agentr1-search-agent"
# the settings the primed model was primed with (tests/test_learning.py): its world, its prompt
PARAMS = {"data": {"synthetic": {"seed": 20251 + 7}}, "agent": {"system_prompt": False, "max_turns": 3},
          "retrieval": {"top_k": 1}}  # fmt: skip


def primed_cfg(tmp_path: Path) -> Config:
    return parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}, **PARAMS})


def index_world(cfg: Config, corpus: str = "synthetic") -> None:
    """The live embedded index of the primed model's world under `corpus`."""
    passages = [Passage(p.id, p.title, p.text, corpus) for p in generate_world(cfg.data.synthetic).passages()]
    EmbeddedBackend(cfg.artifacts / "index", cfg.retrieval.embedded).build(corpus, passages)


def dev_question(cfg: Config) -> str:
    return generate_world(cfg.data.synthetic).questions("dev")[0].question


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    """A server in its own process group (so `stop` ends it and its workers), output to `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_up(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1)
    raise AssertionError(f"server not up after {timeout}s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
