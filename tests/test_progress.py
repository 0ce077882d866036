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

import pyarrow.parquet as pq
import pytest
import yaml

from tests.toy import small_raw


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


@pytest.fixture
def data_project(tmp_path):
    """A fresh project over one shipped dataset (the HotpotQA 300) and the small synthetic worlds."""
    raw = small_raw(tmp_path / "artifacts")
    raw["project"]["data_dir"] = str(Path(__file__).parents[1] / "data")
    raw["data"]["datasets"] = [{"name": "hotpotqa", "format": "hotpotqa_ircot", "split": "dev",
                                "path": "hotpotqa/dev_distractor_ircot_300.jsonl"}]  # fmt: skip
    return tmp_path, raw


@pytest.mark.parametrize("backend", ["embedded", "elasticsearch"])  # [elasticsearch]: the ES worker group
def test_prepare_and_index_bars_on_a_terminal_and_none_in_a_pipe(data_project, backend, request):
    project, raw = data_project
    if backend == "elasticsearch":
        es = request.getfixturevalue("es_backend")  # its test indices are deleted afterwards
        raw["retrieval"] = {"backend": backend, "elasticsearch": {"url": es.url, "index_prefix": es.cfg.index_prefix}}
    (project / "params.yaml").write_text(yaml.safe_dump(raw))
    shown = in_pty([AGENTR1, "prepare", "-p", "params.yaml"], project)
    assert "prepare" in shown and "2/2" in shown and "file/s" in shown and "100%" in shown, shown[-2000:]

    shown = in_pty([AGENTR1, "index", "-p", "params.yaml"], project)  # builds every corpus
    total = len(pq.read_table(project / "artifacts" / "prepared" / "passages.parquet"))
    assert f"index {backend}" in shown and f"{total}/{total}" in shown and "passage/s" in shown, shown[-2000:]
    assert "\r" in shown and "100%" in shown

    quiet = piped([AGENTR1, "index", "-p", "params.yaml"], project)  # nothing to build; still no bar in a pipe
    assert "index done" in quiet and f"index {backend}:" not in quiet and "%|" not in quiet, quiet[-2000:]


CONVERT = """
import sys
from pathlib import Path
from components.env import apply_defaults
apply_defaults()
from components.config import load_config
from components.model.source import convert, resolve_source
convert(resolve_source(load_config(sys.argv[1], {"profile": "real"}).model), Path(sys.argv[2]))
"""


@pytest.mark.slow
def test_the_real_models_gguf_conversion_shows_its_bar_on_a_terminal(tmp_path):
    """base_model (real profile) converts the pinned GGUF: transformers' own bar, with a rate, on a terminal."""
    params = str(Path(__file__).parents[1] / "params.yaml")
    shown = in_pty([sys.executable, "-c", CONVERT, params, str(tmp_path / "m")], tmp_path)
    assert "de-quantizing GGUF tensors" in shown and "it/s" in shown and "100%" in shown, shown[-2000:]
    assert (tmp_path / "m" / "model.safetensors").is_file()
