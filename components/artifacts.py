"""Every path the pipeline writes under `project.artifacts_dir`, the stage that writes it, and the one error
for a missing input ("run stage X first"). dvc.yaml's outs/metrics/plots are these paths (tests/test_artifacts.py).
"""

from __future__ import annotations

from pathlib import Path

from components.config import Config

# What each stage declares to DVC, relative to project.artifacts_dir -> the stage that writes it.
OUTPUTS: dict[str, str] = {
    "prepared": "prepare",
    "validation/report": "validate",
    "validation/summary.json": "validate",
    "index": "index",
    "metrics/retrieval.json": "retrieval_eval",
    "models/base": "base_model",
    "models/pretrained": "base_model",
    "models/trained": "train",
    "train/model.json": "train",
    "train/curve.csv": "train",
    "train/dev_curve.csv": "train",
    "metrics/eval.json": "evaluate",
    "metrics/em.json": "evaluate",
    "eval/per_dataset.csv": "evaluate",
    "eval/report.html": "evaluate",
    "register/decision.json": "register",
}
# Written next to those, but not declared to DVC (working state or a copy of what is logged to MLflow).
UNDECLARED: dict[str, str] = {
    "eval/predictions.jsonl": "evaluate",
    "train/checkpoints": "train",
    "verl": "train",
}


class MissingArtifact(FileNotFoundError):
    """A stage's input does not exist; the message names the path and the stage that writes it."""


def _at(cfg: Config, rel: str) -> Path:
    return cfg.artifacts / rel


# prepare
def prepared(cfg: Config) -> Path:
    return _at(cfg, "prepared")


QUESTIONS_FILE, PASSAGES_FILE = "questions.parquet", "passages.parquet"


def questions(cfg: Config) -> Path:
    return prepared(cfg) / QUESTIONS_FILE


def passages(cfg: Config) -> Path:
    return prepared(cfg) / PASSAGES_FILE


# validate
def validation_report(cfg: Config) -> Path:
    return _at(cfg, "validation/report")


def validation_summary(cfg: Config) -> Path:
    return _at(cfg, "validation/summary.json")


# index, retrieval_eval
def index(cfg: Config) -> Path:
    """The embedded backend's versioned indexes and the index manifest."""
    return _at(cfg, "index")


def index_manifest(cfg: Config) -> Path:
    return index(cfg) / "manifest.json"


def retrieval_metrics(cfg: Config) -> Path:
    return _at(cfg, "metrics/retrieval.json")


# base_model, train
def base_model(cfg: Config) -> Path:
    return _at(cfg, "models/base")


def pretrained_model(cfg: Config) -> Path:
    """The model before any format warm-up: what the direct and naive-RAG baselines use."""
    return _at(cfg, "models/pretrained")


def trained_model(cfg: Config) -> Path:
    return _at(cfg, "models/trained")


def train_model_json(cfg: Config) -> Path:
    return _at(cfg, "train/model.json")


def train_curve(cfg: Config) -> Path:
    return _at(cfg, "train/curve.csv")


def dev_curve(cfg: Config) -> Path:
    return _at(cfg, "train/dev_curve.csv")


def checkpoints(cfg: Config) -> Path:
    """The local trainer's checkpoints (one folder per training config below it)."""
    return _at(cfg, "train/checkpoints")


def verl_workdir(cfg: Config) -> Path:
    """The verl backend's exported data, generated configs, checkpoints and log (absolute: verl runs elsewhere)."""
    return _at(cfg, "verl").resolve()


# evaluate, register
def eval_per_dataset(cfg: Config) -> Path:
    return _at(cfg, "eval/per_dataset.csv")


def eval_report(cfg: Config) -> Path:
    """The trajectory viewer: one self-contained HTML page."""
    return _at(cfg, "eval/report.html")


def eval_predictions(cfg: Config) -> Path:
    return _at(cfg, "eval/predictions.jsonl")


def eval_metrics(cfg: Config) -> Path:
    return _at(cfg, "metrics/eval.json")


def eval_em(cfg: Config) -> Path:
    """EM per system and set: the evaluate stage's DVC metric (eval.json holds every metric, too many for a table)."""
    return _at(cfg, "metrics/em.json")


def decision(cfg: Config) -> Path:
    return _at(cfg, "register/decision.json")


def baselines_results(cfg: Config, profile: str) -> Path:
    """`agentr1 baselines`' per-question results (components/evaluation/baseline_table.py), kept for --resume."""
    return _at(cfg, f"bench/baselines-{profile}.json")


def producer(cfg: Config, path: Path) -> str:
    """The stage that writes `path` (an output above or the file inside one)."""
    for rel, stage in sorted((OUTPUTS | UNDECLARED).items(), key=lambda kv: -len(kv[0])):
        if path == _at(cfg, rel) or _at(cfg, rel) in path.parents:
            return stage
    raise KeyError(f"{path}: not an artifact of any stage (components/artifacts.py)")


def require(cfg: Config, path: Path) -> Path:
    """`path` if it exists, else MissingArtifact naming it and the stage to run first."""
    if not path.exists():
        stage = producer(cfg, path)
        raise MissingArtifact(
            f"{path}: not found (run the {stage} stage first: `agentr1 {stage.replace('_', '-')}` or `dvc repro {stage}`)"
        )
    return path
