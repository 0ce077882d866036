"""Reading again (evaluate.reread): once its episode ends, the agent reads every passage the episode showed, above
the question as in naive RAG's prompt, and answers with the answer tag prefilled. The evaluate stage scores that
answer, the served agent gives it, and with train.reread RL trains it.

    reading = reading_pass(tokenizer, backend, trajectories, cfg.agent, cfg.retrieval.top_k)
    reads = reading.rollout(model, engine=..., progress=...)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from components.agent.observation import numbered
from components.agent.parser import ANSWER_OPEN
from components.config import AgentConfig
from components.data.schema import Question
from components.retrieval.base import SearchBackend
from components.rollout.episode_setup import EpisodeSetup, episode_setup, question_turn_prompt
from components.rollout.trajectory import Trajectory

# One answer turn from a prompt that holds everything: no tool turn, no search of its own.
SINGLE_TURN = {"max_turns": 1, "force_first_search": False, "observation_question": False,
               "observation_first_read": False}  # fmt: skip


def single_turn(agent: AgentConfig) -> AgentConfig:
    """The agent's settings for one answer turn (the baselines' and the reading pass's)."""
    return agent.model_copy(update=SINGLE_TURN)


@dataclass(frozen=True)
class ReadingPass:
    """The single-turn set-up, the questions and each one's prompt: its episode's passages above the question."""

    setup: EpisodeSetup
    questions: list[Question]
    prompts: list[list[int]]

    def rollout(self, model, temperature: float = 0.0, **kwargs) -> list[Trajectory]:
        """One answer turn per question, greedy by default (kwargs: the engine's settings, stats, progress, the
        sampling generator), the answer tag prefilled."""
        return self.setup.rollout(model, self.questions, self.prompts, temperature=temperature, prefill=ANSWER_OPEN,
                                  **kwargs)  # fmt: skip


def reading_pass(tokenizer, backend: SearchBackend, trajectories: Sequence[Trajectory], agent: AgentConfig,
                 top_k: int, generation_config=None) -> ReadingPass:  # fmt: skip
    """The reading pass over finished episodes: every passage each one was shown (Episode.read), in the order shown."""
    questions = [t.episode.question for t in trajectories]
    setup = episode_setup(tokenizer, backend, questions, single_turn(agent), top_k, generation_config)
    prompts = [question_turn_prompt(setup.chat, q.question, numbered(list(t.episode.read.values())))
               for q, t in zip(questions, trajectories)]  # fmt: skip
    return ReadingPass(setup, questions, prompts)
