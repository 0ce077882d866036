"""components/artifacts.py is the one artifact layout: dvc.yaml declares exactly its paths, stage by stage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from components import artifacts
from components.config import Config, ProjectConfig
from components.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]


def _paths(entries) -> set[str]:
    """outs/metrics/plots/deps entries: a path, or a one-key mapping path -> options."""
    return {e if isinstance(e, str) else next(iter(e)) for e in entries or []}


@pytest.fixture(scope="module")
def dvc_stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_dvc_outputs_are_the_layout(dvc_stages):
    cfg = Config()  # dvc.yaml runs with the default artifacts_dir
    declared = {
        name: _paths(s.get("outs")) | _paths(s.get("metrics")) | _paths(s.get("plots")) for name, s in dvc_stages.items()
    }
    layout: dict[str, set[str]] = {}
    for rel, stage in artifacts.OUTPUTS.items():
        layout.setdefault(stage, set()).add((cfg.artifacts / rel).as_posix())
    assert declared == layout
    assert set(layout) == set(STAGES)


def test_dvc_artifact_deps_are_outputs_of_another_stage(dvc_stages):
    cfg = Config()
    for name, s in dvc_stages.items():
        for dep in _paths(s.get("deps")):
            if dep.startswith(f"{cfg.project.artifacts_dir}/"):
                assert artifacts.producer(cfg, Path(dep)) != name, f"dvc.yaml: stage {name} depends on its own {dep}"


def test_every_accessor_has_a_producing_stage(tmp_path):
    cfg = Config(project=ProjectConfig(artifacts_dir=str(tmp_path)))
    accessors = [artifacts.questions, artifacts.passages, artifacts.validation_report, artifacts.validation_summary,
                 artifacts.index_manifest, artifacts.retrieval_metrics, artifacts.base_model, artifacts.pretrained_model,
                 artifacts.trained_model, artifacts.train_model_json, artifacts.train_curve, artifacts.dev_curve,
                 artifacts.checkpoints, artifacts.verl_workdir,
                 artifacts.eval_per_dataset, artifacts.eval_predictions, artifacts.eval_metrics, artifacts.eval_em,
                 artifacts.decision]  # fmt: skip
    for accessor in accessors:
        assert artifacts.producer(cfg, accessor(cfg)) in STAGES, accessor.__name__


def test_require_names_the_path_and_the_stage_to_run(tmp_path):
    cfg = Config(project=ProjectConfig(artifacts_dir=str(tmp_path)))
    cases = {artifacts.questions(cfg): "prepare", artifacts.base_model(cfg): "base_model",
             artifacts.eval_metrics(cfg): "evaluate", artifacts.train_model_json(cfg): "train"}  # fmt: skip
    for path, stage in cases.items():
        with pytest.raises(artifacts.MissingArtifact) as err:
            artifacts.require(cfg, path)
        assert str(err.value) == (f"{path}: not found (run the {stage} stage first: "
                                  f"`agentr1 {stage.replace('_', '-')}` or `dvc repro {stage}`)")  # fmt: skip
        assert isinstance(err.value, FileNotFoundError)  # the CLI prints it as one line
    artifacts.questions(cfg).parent.mkdir(parents=True)
    artifacts.questions(cfg).write_bytes(b"")
    assert artifacts.require(cfg, artifacts.questions(cfg)) == artifacts.questions(cfg)
    with pytest.raises(KeyError, match="not an artifact of any stage"):
        artifacts.require(cfg, tmp_path / "elsewhere.json")


def test_no_module_builds_an_artifact_path_by_hand():
    """Only components/artifacts.py joins the artifacts root with a name or names the prepared files."""
    by_hand = re.compile(r"\.artifacts(\.resolve\(\))?\s*/|[\"'](questions|passages)\.parquet[\"']")
    offenders = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sorted((ROOT / "components").rglob("*.py")) + sorted((ROOT / "flows").rglob("*.py"))
        if p.name != "artifacts.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if by_hand.search(line) and "_PASSAGES = " not in line  # the embedded index's own copy, inside its version
    ]
    assert not offenders, "\n".join(offenders)
