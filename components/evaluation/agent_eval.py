"""The agent and its baselines, run greedily on questions and scored (the evaluate stage and the trainer's held-out EM).

Modes: "agent" (multi-turn with tools; use the base model for "tools, no RL"), "direct" (no retrieval: the
answer tag is prefilled), "naive_rag" (one search with the question as the query, shown as the observation of a
completed call, or in the question turn with `naive_rag="question_turn"`; then the answer tag is prefilled).
Baselines are scored on plain generation (answers.py), the agent on its strict answer tag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from components.agent.parser import ANSWER_OPEN
from components.agent.rewards import exact_match, f1, is_yes_no
from components.config import AgentConfig, RolloutConfig, SearchedAt
from components.data.schema import Question
from components.evaluation.answers import read_answer
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat
from components.rollout.engine import RolloutStats
from components.rollout.episode_setup import episode_setup, searched_prompts
from components.rollout.progress import GenerationProgress
from components.rollout.reread import reading_pass, single_turn
from components.rollout.steps import episode_steps
from components.rollout.trajectory import Trajectory, transcript

Mode = Literal["agent", "direct", "naive_rag"]


BATCH_TOKENS = 131072  # default bound of the KV cache: rows x the longest possible row


@dataclass(frozen=True)
class AgentResult:
    question_id: str
    dataset: str
    question: str
    answers: list[str]
    prediction: str | None  # scored: the strict parse for the agent, plain generation for a baseline
    turns: int
    searches: int
    em: float
    f1: float
    transcript: str
    strict_prediction: str | None = None  # the strict <answer>...</answer> parse (the agent's reward)
    em_strict: float = 0.0
    f1_strict: float = 0.0
    plain: bool = False  # scored as plain generation (direct, naive RAG)
    outcome: float = 0.0  # the episode's outcome reward
    process: float = 0.0  # the sum of its process rewards
    steps: list[dict] = field(default_factory=list, compare=False)  # turns and tool calls with wall-clock times (rollout.steps)
    support_recall: float | None = None  # the agent's share of the gold supporting passages its searches showed


def evaluate_agent(
    model,
    tokenizer,
    questions: Sequence[Question],
    backend: SearchBackend,
    agent: AgentConfig,
    top_k: int = 3,
    mode: Mode = "agent",
    batch_tokens: int = BATCH_TOKENS,
    stats: RolloutStats | None = None,
    desc: str | None = None,
    engine: RolloutConfig | None = None,
    naive_rag: SearchedAt = "tool_response",
    reread: bool = False,
) -> list[AgentResult]:
    """Greedy episodes, at most `batch_tokens` (rows x the longest possible row) in the KV cache at once; with
    `reread` (evaluate.reread), an agent's answer is the one it gives reading every passage its episode showed."""
    if mode != "agent":
        agent = single_turn(agent)
    questions = list(questions)
    episodes = episode_setup(tokenizer, backend, questions, agent, top_k, getattr(model, "generation_config", None))
    chat = episodes.chat
    prefill = ANSWER_OPEN if mode != "agent" else ""
    if mode == "naive_rag":
        prompts = searched_prompts(questions, chat, episodes.env, naive_rag)
    else:
        prompts = episodes.prompts(questions)
    engine = engine or RolloutConfig()
    sized = _sized(engine, prompts, chat, prefill, agent, batch_tokens)
    with GenerationProgress(len(questions), desc or mode) as bar:
        trajs = episodes.rollout(model, questions, prompts, temperature=0.0, stats=stats, prefill=prefill,
                                 progress=bar, engine=sized)  # fmt: skip
    out = [_result(t, chat, plain=mode != "agent") for t in trajs]
    if reread and mode == "agent":  # naive RAG's prompt over every passage the episode showed, the answer tag prefilled
        reading = reading_pass(tokenizer, backend, trajs, agent, top_k, getattr(model, "generation_config", None))
        sized = _sized(engine, reading.prompts, chat, ANSWER_OPEN, reading.setup.agent, batch_tokens)
        with GenerationProgress(len(questions), f"{desc or mode} reread") as bar:
            reads = reading.rollout(model, stats=stats, progress=bar, engine=sized)
        out = [_reread(r, _result(t, chat, plain=True)) for r, t in zip(out, reads)]
    return out


def _sized(engine: RolloutConfig, prompts: Sequence[list[int]], chat: ChatFormat, prefill: str, agent: AgentConfig,
            batch_tokens: int) -> RolloutConfig:  # fmt: skip
    """`engine` with as many rows as fit `batch_tokens` (the KV cache's rows x columns) for these prompts."""
    extra = len(chat.encode(prefill)) if prefill else 0
    bound = max((row_bound(len(p) + extra, agent) for p in prompts), default=1)
    return engine.model_copy(update={"max_rows": max(1, min(engine.max_rows, batch_tokens // bound))})


def _reread(episode: AgentResult, read: AgentResult) -> AgentResult:
    """The episode's result scored on the answer it gave reading its passages again (plain generation); its own
    strict answer stays as em_strict."""
    text = f"{episode.transcript}\n    reread: {read.prediction!r}  EM={read.em:.0f} F1={read.f1:.2f}"
    return replace(episode, prediction=read.prediction, em=read.em, f1=read.f1, transcript=text, plain=True)


def row_bound(prompt_len: int, agent: AgentConfig) -> int:
    """The most tokens a row can hold: its prompt plus one turn for a single-turn mode, else max_total_tokens.

    (Padding holes between rows' insertions can widen a multi-turn batch's cache beyond this.)
    """
    if agent.max_turns == 1:
        return min(prompt_len + agent.max_tokens_per_turn, max(prompt_len, agent.max_total_tokens))
    return max(prompt_len, agent.max_total_tokens)


def _result(t: Trajectory, chat: ChatFormat, plain: bool) -> AgentResult:
    ep = t.episode
    gold = list(ep.question.answers)
    strict = ep.answer
    prediction = strict
    if plain:
        prediction = read_answer(t, chat.stop_texts)
    text = transcript(t)
    if plain:
        text += f"\n    plain: {prediction!r}  EM={exact_match(prediction, gold):.0f} F1={f1(prediction, gold):.2f}"
    return AgentResult(ep.question.id, ep.question.dataset, ep.question.question, gold, prediction, ep.turns,
                       ep.n_valid_calls, exact_match(prediction, gold), f1(prediction, gold), text, strict, ep.em,
                       ep.f1, plain, ep.outcome, sum(ep.process_rewards), episode_steps(t),
                       None if plain else ep.support_recall)  # fmt: skip


def summarize(results: Sequence[AgentResult], prefix: str = "") -> dict[str, float]:
    """Means over the results; baselines scored as plain generation add the strict parse's em/f1/answered."""
    n = max(1, len(results))
    out = {
        f"{prefix}em": sum(r.em for r in results) / n,
        f"{prefix}f1": sum(r.f1 for r in results) / n,
        f"{prefix}turns": sum(r.turns for r in results) / n,
        f"{prefix}searches": sum(r.searches for r in results) / n,
        f"{prefix}answered": sum(r.prediction is not None for r in results) / n,
        f"{prefix}yes_no": sum(is_yes_no(r.prediction) for r in results) / n,  # a collapse shows here
    }
    recalls = [r.support_recall for r in results if r.support_recall is not None]
    if recalls:  # the agent on a set with gold passages: what its searches found
        out[f"{prefix}support_recall"] = sum(recalls) / len(recalls)
    if any(r.plain for r in results):
        out |= {
            f"{prefix}em_strict": sum(r.em_strict for r in results) / n,
            f"{prefix}f1_strict": sum(r.f1_strict for r in results) / n,
            f"{prefix}answered_strict": sum(r.strict_prediction is not None for r in results) / n,
        }
    return out
