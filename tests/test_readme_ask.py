"""Every `agentr1 ask "..."` example in README.md's bash blocks, run against a built project's champion.

An example about the synthetic world must name its people and relations (the shipped world of params.yaml can answer
it) and gets an answer with no note; any other question gets the plain note that the model cannot read it, before
the answer. Either way the first line says what the model is, and `ask` exits 0."""

from __future__ import annotations

import re
import shlex
import sys

import yaml

from components.config import parse_config
from components.data.synthetic import RELATIONS, generate_world
from tests.project import ROOT, run

FENCE = re.compile(r"^```(?:bash|sh|shell|console)\s*\n(.*?)^```", re.M | re.S)
WORD = re.compile(r"[A-Za-z]+")
SKIP_OPTIONS = {"--version", "--alias", "--corpus", "-p", "--params", "-S", "--set", "--url"}  # another project state or a server


def readme_questions(text: str) -> list[str]:
    """The questions of `agentr1 ask` lines in README's bash blocks (placeholders and pinned versions left out)."""
    out = []
    for block in FENCE.findall(text):
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ")
            if not line.startswith("agentr1 ask"):
                continue
            args = shlex.split(line, comments=True)[2:]
            if SKIP_OPTIONS & set(args):
                continue
            question = [a for a in args if not a.startswith("-")]
            if len(question) == 1 and question[0].strip(". ") and "..." not in question[0]:
                out.append(question[0])
    return out


def test_readme_questions_are_parsed():
    text = "```bash\nagentr1 ask \"Who is A?\"   # note\n$ agentr1 ask --json 'B?'\nagentr1 ask --version 3 \"...\"\n```\n"
    assert readme_questions(text) == ["Who is A?", "B?"]


def _in_world(question: str, world) -> bool:
    names = set(world.entities) | set(RELATIONS)
    return any(w in names for w in WORD.findall(question))


def test_readme_ask_examples_work_as_shown(built, tmp_path):
    questions = readme_questions((ROOT / "README.md").read_text())
    assert questions, "README.md shows no `agentr1 ask \"...\"` example in a bash block"
    shipped = parse_config(yaml.safe_load((ROOT / "params.yaml").read_text()))
    world = generate_world(shipped.data.synthetic)
    project = built.copy(tmp_path / "p")
    import mlflow

    champion = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}").get_model_version_by_alias("agentr1-search-agent", "champion")
    about = champion.description.split("\n")[0].rstrip(".")  # the registered version says what the model is
    assert about.startswith("tiny Qwen2 model (") and "; world: the 'synthetic' corpus" in about and "; trained: " in about
    for q in questions:
        out = run([sys.executable, "-m", "components.cli", "ask", q], project)
        lines = out.stdout.splitlines()
        assert lines[0] == f"model agentr1-search-agent v{champion.version}: {about}", out.stdout
        answer = next(i for i, line in enumerate(lines) if line.startswith("A: "))
        noted = [i for i, line in enumerate(lines) if line.startswith("note: ")]
        if _in_world(q, world):
            words = WORD.findall(q)
            start = words[-1]
            assert start in world.entities, f"README: {q!r} names {start!r}, not a person of the shipped world"
            chain = tuple(reversed([w for w in words if w in RELATIONS]))
            assert chain and all(r in world.relations for r in chain), f"README: {q!r} asks a relation the world lacks"
            assert world.follow(start, chain)  # the shipped world answers it
            assert not noted, out.stdout
        else:
            assert noted and noted[0] < answer and "cannot read this question" in lines[noted[0]], out.stdout
