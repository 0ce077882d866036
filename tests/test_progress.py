"""Progress bars of the stages: drawn (with a rate) on stderr under a pseudo-terminal, absent when stderr is
not a terminal. Real CLI runs of `agentr1 validate` and `agentr1 evaluate` on the small evaluated project."""

import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.terminal import in_pty, piped, terminal_env
from tests.toy import small_raw


AGENTR1 = str(Path(sys.executable).parent / "agentr1")


def _env(project: Path) -> dict[str, str]:
    return terminal_env(project, MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}")


@pytest.mark.parametrize(("stage", "bar", "rate"), [("evaluate", "agent synthetic/dev", "tok/s"), ("validate", "validate", "suite/s")])
def test_stage_bars_on_a_terminal_and_none_in_a_pipe(evaluated, stage, bar, rate):
    project = evaluated.root
    cmd = [AGENTR1, stage, "-p", "params.yaml"]
    shown = in_pty(cmd, project, _env(project))
    assert bar in shown and rate in shown and "\r" in shown and "100%" in shown, shown[-2000:]
    quiet = piped(cmd, project, _env(project))
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
    shown = in_pty([AGENTR1, "prepare", "-p", "params.yaml"], project, _env(project))
    assert "prepare" in shown and "2/2" in shown and "file/s" in shown and "100%" in shown, shown[-2000:]

    shown = in_pty([AGENTR1, "index", "-p", "params.yaml"], project, _env(project))  # builds every corpus
    total = len(pq.read_table(project / "artifacts" / "prepared" / "passages.parquet"))
    assert f"index {backend}" in shown and f"{total}/{total}" in shown and "passage/s" in shown, shown[-2000:]
    assert "\r" in shown and "100%" in shown

    quiet = piped([AGENTR1, "index", "-p", "params.yaml"], project, _env(project))  # nothing to build; still no bar in a pipe
    assert "index done" in quiet and f"index {backend}:" not in quiet and "%|" not in quiet, quiet[-2000:]
