"""Progress bars of the stages: drawn (with a rate) on stderr under a pseudo-terminal, absent when stderr is
not a terminal. Real CLI runs of `agentr1 validate` and `agentr1 evaluate` on the small evaluated project."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest


AGENTR1 = str(Path(sys.executable).parent / "agentr1")


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}  # as a fresh shell would have it
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}", PYTHONPATH=str(Path(__file__).parents[1]),
               COLUMNS="120")  # fmt: skip
    return env


def in_pty(cmd: list[str], project: Path) -> str:
    """Run with stderr (and stdin) on a pseudo-terminal; returns what the terminal showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 x 120, like a real terminal
    proc = subprocess.Popen(cmd, cwd=project, env=_env(project), stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=600) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def piped(cmd: list[str], project: Path) -> str:
    out = subprocess.run(cmd, cwd=project, env=_env(project), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr


@pytest.mark.parametrize(("stage", "bar", "rate"), [("evaluate", "agent synthetic/dev", "tok/s"), ("validate", "validate", "suite/s")])
def test_stage_bars_on_a_terminal_and_none_in_a_pipe(evaluated, stage, bar, rate):
    project, _ = evaluated
    cmd = [AGENTR1, stage, "-p", "params.yaml"]
    shown = in_pty(cmd, project)
    assert bar in shown and rate in shown and "\r" in shown and "100%" in shown, shown[-2000:]
    quiet = piped(cmd, project)
    assert f"{stage} done" in quiet  # the stage ran and reported
    assert bar + ":" not in quiet and rate not in quiet and "%|" not in quiet, quiet[-2000:]
