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


ROOT = Path(__file__).resolve().parents[1]


def register_champion(cfg: Config, hf_dir: Path, tags: dict | None = None) -> str:
    """Log `hf_dir` as the pyfunc agent model, register it and put `champion` on it; returns the version."""
    import mlflow

    from components.serving.pyfunc import log_agent_model

    with mlflow.start_run():
        info = log_agent_model(cfg, hf_dir, "synthetic")
    client = mlflow.MlflowClient()
    try:
        client.get_registered_model(NAME)
    except mlflow.exceptions.MlflowException:
        client.create_registered_model(NAME)
    mv = mlflow.register_model(info.model_uri, NAME, tags=tags or {cfg.registry.metric: "0.5"})
    client.set_registered_model_alias(NAME, "champion", mv.version)
    return str(mv.version)


def serve(uri: str, cwd: Path, log: Path, workers: int = 1, timeout_s: int | None = None,
          code: Path = ROOT) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """`mlflow models serve` of the champion on 127.0.0.1 (from `code`'s components); (process, base URL) once up."""
    import sys

    bin_dir = Path(sys.executable).parent
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(code), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    cmd = ["mlflow", "models", "serve", "-m", f"models:/{NAME}@champion", "--env-manager", "local",
           "--host", "127.0.0.1", "-p", str(port), "-w", str(workers)]  # fmt: skip
    if timeout_s is not None:
        cmd += ["-t", str(timeout_s)]
    proc = start(cmd, cwd, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_up(f"{base}/ping", proc, log)
    except BaseException:
        stop(proc)
        raise
    return proc, base


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and all its children."""
    import psutil  # a dependency of dvc

    total = 0.0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total
