"""Episodes as plain trace records (components.tracking.mlflow_traces writes them to MLflow): from an evaluation
result or a training trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from components.rollout.steps import episode_steps


@dataclass(frozen=True)
class EpisodeTrace:
    question_id: str
    question: str
    gold: list[str]
    answer: str | None
    em: float
    f1: float
    outcome: float
    process: float
    steps: list[dict]  # components.rollout.steps.episode_steps
    tags: dict[str, str] = field(default_factory=dict)


def from_result(r, **tags: str) -> EpisodeTrace:
    """From an evaluation AgentResult (scored as the evaluate stage scores it)."""
    return EpisodeTrace(r.question_id, r.question, list(r.answers), r.prediction, r.em, r.f1, r.outcome, r.process,
                        r.steps, dict(tags))  # fmt: skip


def from_trajectory(t, **tags: str) -> EpisodeTrace:
    ep = t.episode
    return EpisodeTrace(ep.question.id, ep.question.question, list(ep.question.answers), ep.answer, ep.em, ep.f1,
                        ep.outcome, sum(ep.process_rewards), episode_steps(t), dict(tags))  # fmt: skip


STEP_TAG, EPISODE_TAG = "agentr1.step", "agentr1.episode"
LINEAGE_TAG = "agentr1.train_lineage"  # the first run of a training and every run resumed from it


def train_traces(cfg, trajs: Sequence, step: int) -> list[EpisodeTrace]:
    """A few of a training step's episodes (one per group), to be logged as traces of the train run; each tagged
    with its step and its place in the sample, so a resumed run can tell which were logged already."""
    sample = list(trajs)[:: max(1, cfg.train.group_size)][: cfg.tracking.traces]
    return [from_trajectory(t, **{STEP_TAG: str(step), EPISODE_TAG: str(i)}) for i, t in enumerate(sample)]


def trace_key(tags: dict[str, str]) -> str:
    """`step:episode` of a training trace (its tags), '' for any other trace."""
    return f"{tags[STEP_TAG]}:{tags[EPISODE_TAG]}" if STEP_TAG in tags and EPISODE_TAG in tags else ""
