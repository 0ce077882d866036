"""`agentr1 ask` on a real MLflow registry (the committed primed tiny model) and a real embedded BM25 index."""

import json
from pathlib import Path

import mlflow
import pytest
from typer.testing import CliRunner

from components.cli import app
from components.config import parse_config
from components.data.schema import Passage
from components.data.synthetic import generate_world
from components.retrieval.embedded import EmbeddedBackend
from components.tracking.models import log_hf_model

PRIMED = sorted((Path(__file__).parent / "fixtures" / "primed").iterdir())[-1]
NAME = "agentr1-search-agent"
# the settings the primed model was primed with (tests/test_learning.py): its world, its prompt
PARAMS = {"data": {"synthetic": {"seed": 20251 + 7}}, "agent": {"system_prompt": False, "max_turns": 3},
          "retrieval": {"top_k": 1}}


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _register(client, source: str | None = None) -> str:
    """A new version: the primed tiny model logged for real, or only a registry entry when `source` is given."""
    if source is None:
        with mlflow.start_run():
            source = log_hf_model(PRIMED, "agent")
    try:
        client.get_registered_model(NAME)
    except mlflow.exceptions.MlflowException:
        client.create_registered_model(NAME)
    return str(mlflow.register_model(source, NAME, tags={"em/synthetic/dev": "0.5"}).version)


def _cfg(tmp_path):
    return parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}, **PARAMS})


def _index(tmp_path, corpus="synthetic"):
    """The live index of the primed model's world under `corpus`."""
    cfg = _cfg(tmp_path)
    passages = [Passage(p.id, p.title, p.text, corpus) for p in generate_world(cfg.data.synthetic).passages()]
    EmbeddedBackend(cfg.artifacts / "index", cfg.retrieval.embedded).build(corpus, passages)


@pytest.fixture
def project(mlflow_uri, tmp_path):
    (tmp_path / "params.yaml").write_text(json.dumps({"project": {"artifacts_dir": str(tmp_path / "artifacts")}, **PARAMS}))
    return mlflow.MlflowClient()


def _question(tmp_path) -> str:
    return generate_world(_cfg(tmp_path).data.synthetic).questions("dev")[0].question


def test_ask_champion_prints_calls_and_answer_and_json(project, tmp_path):
    v = _register(project)
    project.set_registered_model_alias(NAME, "champion", v)
    _index(tmp_path)
    question = _question(tmp_path)
    out = _cli("ask", "--json", question)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["question"] == question and data["model_name"] == NAME and data["model_version"] == v
    assert data["corpus"] == "synthetic" and data["turns"]
    assert data["timings"]["total_s"] >= data["timings"]["agent_s"] > 0 and data["timings"]["tokens"] > 0
    calls = [t for t in data["turns"] if t["call"] is not None]
    assert calls, data["turns"]  # the primed agent searches before it answers
    for t in calls:
        assert t["call"]["name"] == "search" and t["observation"]
    text = _cli("ask", question)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[1] == f"Q: {question}"
    assert f"call search(query={calls[0]['call']['arguments']['query']!r})" in text.stdout
    snippet = " ".join(calls[0]["observation"].split())[:40]
    assert any(line.startswith("    -> ") and snippet in line for line in lines)
    answer = data["answer"] if data["answer"] is not None else "(no answer)"
    assert f"A: {answer}" in lines and lines[-1].startswith("time: registry ")


def test_ask_errors_are_one_line_naming_the_thing(project, tmp_path):
    QUESTION = "Who is the father of Bavo?"
    def fails(*args):
        out = _cli("ask", *args)
        assert out.exit_code == 1 and "Traceback" not in out.output, out.output
        assert out.output.startswith("agentr1 ask failed:"), out.output
        return out.output

    assert "the question is empty" in fails("   ")
    assert f"no registered model {NAME!r}" in fails(QUESTION)
    v = _register(project, source=str(tmp_path))  # a registry entry only: every check below fails before loading
    assert "has no alias 'champion'" in fails(QUESTION)
    assert "has no alias 'staging'" in fails("--alias", "staging", QUESTION)
    assert "has no version 7" in fails("--version", "7", QUESTION)
    msg = fails("--version", v, QUESTION)
    assert "no live search index for corpus 'synthetic'" in msg and "agentr1 index" in msg
    _index(tmp_path, corpus="wiki")
    assert "corpus 'synthetic'" in fails("--version", v, QUESTION)  # another corpus's index is not the model's
    _index(tmp_path)
    assert f"{NAME} v{v} ({tmp_path}): cannot load the model" in fails("--version", v, QUESTION)
