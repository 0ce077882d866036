"""Run the agent greedily on questions and score it; plus the baselines the evaluate stage compares against.

Modes: "agent" (multi-turn with tools; use the base model for "tools, no RL"), "direct" (no retrieval: the
answer tag is prefilled), "naive_rag" (one search with the question as the query, shown as an observation,
then the answer tag is prefilled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from components.agent.env import ToolEnv
from components.agent.observation import format_hits
from components.agent.parser import ANSWER_OPEN
from components.agent.tools import SearchTool
from components.config import AgentConfig
from components.data.schema import Question
from components.model.priming import call_text
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat
from components.rollout.engine import RolloutStats, rollout
from components.rollout.trajectory import Trajectory

Mode = Literal["agent", "direct", "naive_rag"]


@dataclass(frozen=True)
class AgentResult:
    question_id: str
    dataset: str
    question: str
    answers: list[str]
    prediction: str | None
    turns: int
    searches: int
    em: float
    f1: float
    transcript: str


def make_env(backend: SearchBackend, questions: Sequence[Question], agent: AgentConfig, top_k: int,
             chat: ChatFormat | None = None) -> ToolEnv:  # fmt: skip
    """A ToolEnv with a search tool per corpus; with `chat`, passages are cut to agent.passage_max_tokens."""
    corpora = sorted({q.corpus for q in questions})
    cut = chat.cutter(agent.passage_max_tokens) if chat is not None else None
    return ToolEnv({c: [SearchTool(backend, c, top_k, cut)] for c in corpora}, agent)


def transcript(t: Trajectory, chat: ChatFormat) -> str:
    """Readable trajectory: the question, each call, each observation, the answer and the rewards."""
    ep = t.episode
    lines = [f"Q: {ep.question.question}  (gold: {' | '.join(ep.question.answers)})"]
    for role, text in ep.log[1:]:
        lines.append(f"{role:>9}: {text}".replace("\n", "\n           "))
    lines.append(f"   answer: {ep.answer!r}  EM={ep.em:.0f} F1={ep.f1:.2f}  outcome={ep.outcome:+.2f}  "
                 f"process={sum(ep.process_rewards):+.2f}")  # fmt: skip
    return "\n".join(lines)


def evaluate_agent(
    model,
    tokenizer,
    questions: Sequence[Question],
    backend: SearchBackend,
    agent: AgentConfig,
    top_k: int = 3,
    mode: Mode = "agent",
    batch_size: int = 256,
    stats: RolloutStats | None = None,
) -> list[AgentResult]:
    chat = ChatFormat.for_agent(tokenizer, agent)
    if mode != "agent":
        agent = agent.model_copy(update={"max_turns": 1})
    env = make_env(backend, questions, agent, top_k, chat)
    out: list[AgentResult] = []
    for start in range(0, len(questions), batch_size):
        qs = list(questions[start : start + batch_size])
        prompts = None
        if mode == "naive_rag":
            prompts = _naive_rag_prompts(qs, chat, backend, top_k, chat.cutter(agent.passage_max_tokens))
        trajs = rollout(model, chat, env, qs, agent, temperature=0.0, stats=stats, prompts=prompts,
                        prefill=ANSWER_OPEN if mode != "agent" else "")  # fmt: skip
        for t in trajs:
            ep = t.episode
            out.append(AgentResult(ep.question.id, ep.question.dataset, ep.question.question, list(ep.question.answers),
                                   ep.answer, ep.turns, ep.n_valid_calls, ep.em, ep.f1, transcript(t, chat)))  # fmt: skip
    return out


def _naive_rag_prompts(qs: list[Question], chat: ChatFormat, backend: SearchBackend, top_k: int,
                       cut=None) -> list[list[int]]:  # fmt: skip
    prompts = []
    by_corpus: dict[str, list[int]] = {}
    for i, q in enumerate(qs):
        by_corpus.setdefault(q.corpus, []).append(i)
    observations: dict[int, str] = {}
    for corpus, idx in by_corpus.items():
        hits = backend.search(corpus, [qs[i].question for i in idx], top_k)
        for i, h in zip(idx, hits):
            observations[i] = format_hits(h, cut) if h else "No results."
    for i, q in enumerate(qs):
        ids = chat.prompt_ids(q.question) + chat.encode(call_text(q.question)) + [chat.eos_id]
        prompts.append(ids + list(chat.insert_ids(observations[i], True)))
    return prompts


def summarize(results: Sequence[AgentResult], prefix: str = "") -> dict[str, float]:
    n = max(1, len(results))
    return {
        f"{prefix}em": sum(r.em for r in results) / n,
        f"{prefix}f1": sum(r.f1 for r in results) / n,
        f"{prefix}turns": sum(r.turns for r in results) / n,
        f"{prefix}searches": sum(r.searches for r in results) / n,
        f"{prefix}answered": sum(r.prediction is not None for r in results) / n,
    }
