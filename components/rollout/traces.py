"""Episodes as plain trace records (components.tracking.traces writes them to MLflow): from an evaluation
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


def log_train_traces(tracker, cfg, trajs: Sequence, step: int) -> None:
    """A few of a training step's episodes (one per group), as traces of the train run."""
    n = cfg.tracking.traces
    if n:
        sample = list(trajs)[:: max(1, cfg.train.group_size)][:n]
        tracker.log_traces([from_trajectory(t, **{"agentr1.step": str(step)}) for t in sample], f"train/step {step}")
