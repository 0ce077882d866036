"""The real profile's pinned GGUF, converted once per test run by a process on a pseudo-terminal, into a model cache
that the xdist workers share: tests/test_real_model.py checks the conversion and its progress bar, and
tests/test_vllm_engine.py loads its model from the same cache instead of converting it a second time."""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.built_project import session_dir
from tests.terminal import in_pty, terminal_env

ROOT = Path(__file__).resolve().parents[1]

MATERIALISE = """
import json, sys
from pathlib import Path
from components.env import apply_defaults
apply_defaults()
from components.config import load_config
from components.base_model.source import materialise
materialise(load_config(sys.argv[1], json.loads(sys.argv[2])).model, Path(sys.argv[3]))
"""


@dataclass(frozen=True)
class Converted:
    cache_dir: Path  # a model.cache_dir that holds the conversion
    shown: str  # what the converting process's terminal showed


@pytest.fixture(scope="session")
def real_conversion(tmp_path_factory) -> Converted:
    """Converted into an empty cache (so it really converts) by the first worker that needs it; a second one waits
    on the lock, then reads the same cache."""
    root = session_dir(tmp_path_factory) / "real-conversion"
    root.mkdir(exist_ok=True)
    cache, shown = root / "cache", root / "terminal.txt"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shown.exists():  # not converted yet, or a failed conversion: start again from an empty cache
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(root / "base", ignore_errors=True)
            overrides = {"profile": "real", "model.cache_dir": str(cache)}
            cmd = [sys.executable, "-c", MATERIALISE, str(ROOT / "params.yaml"), json.dumps(overrides), str(root / "base")]
            shown.write_text(in_pty(cmd, root, terminal_env(root)))
    return Converted(cache, shown.read_text())
