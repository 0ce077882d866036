"""Run a command with stderr on a pseudo-terminal (as a person sees it) or piped (as DVC and Prefect see it)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from pathlib import Path


def terminal_env(project: Path, **extra: str) -> dict[str, str]:
    """A fresh shell's environment (no TQDM_DISABLE), the repo importable, a 120-column terminal."""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env.update(PYTHONPATH=str(Path(__file__).parents[1]), COLUMNS="120", **extra)
    return env


def in_pty(cmd: list[str], project: Path, env: dict[str, str]) -> str:
    """Run with stderr (and stdin) on a pseudo-terminal; returns what the terminal showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 x 120, like a real terminal
    proc = subprocess.Popen(cmd, cwd=project, env=env, stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
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


def piped(cmd: list[str], project: Path, env: dict[str, str]) -> str:
    """Run with stderr on a pipe; returns stderr."""
    out = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr
