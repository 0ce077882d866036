"""The one episode set-up of training, evaluation, the warm-up's probes and serving: the agent's chat format, a tool
environment over the questions' corpora, the prompts episodes start from, then the rollout.

    episodes = episode_setup(tokenizer, backend, questions, cfg.agent, cfg.retrieval.top_k)
    trajectories = episodes.rollout(model, questions, temperature=1.0, generator=...)

Under agent.force_first_search the environment searches each question before the first turn and the prompt shows
the results as a finished first call, or above the question (agent.first_search_at: question_turn); otherwise a
prompt is the rendered question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from components.agent.tool_env import ToolEnv
from components.agent.parser import call_text
from components.agent.prompts import initial_messages, render_prompt
from components.agent.tools import SearchTool
from components.config import AgentConfig, SearchedAt
from components.data.schema import Question
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat
from components.rollout.engine import rollout
from components.rollout.trajectory import Trajectory



@dataclass(frozen=True)
class EpisodeSetup:
    """What an agent's episodes run in: its chat format and its tool environment, under its settings."""

    chat: ChatFormat
    env: ToolEnv
    agent: AgentConfig

    def prompts(self, questions: Sequence[Question]) -> list[list[int]]:
        """The prompt ids each question's episode starts from (searched ones under agent.force_first_search)."""
        if self.agent.force_first_search:
            return searched_prompts(questions, self.chat, self.env, self.agent.first_search_at)
        return [self.chat.prompt_ids(q.question) for q in questions]

    def rollout(self, model, questions: Sequence[Question], prompts: Sequence[list[int]] | None = None,
                **kwargs) -> list[Trajectory]:  # fmt: skip
        """One episode per question (components.rollout.engine.rollout; `kwargs` are its sampling and engine
        settings), from `prompts` or, by default, the agent's own."""
        prompts = self.prompts(questions) if prompts is None else prompts
        return rollout(model, self.chat, self.env, questions, self.agent, prompts=prompts, **kwargs)


def episode_setup(tokenizer, backend: SearchBackend, questions: Sequence[Question], agent: AgentConfig, top_k: int,
                  generation_config=None) -> EpisodeSetup:  # fmt: skip
    """The set-up of the agent's episodes on `questions` (or any others on their corpora) over `backend`.
    `generation_config` adds the model's own end-of-turn ids to the chat format's stop ids."""
    chat = ChatFormat.for_agent(tokenizer, agent, generation_config)
    return EpisodeSetup(chat, make_env(backend, questions, agent, top_k, chat), agent)


def make_env(backend: SearchBackend, questions: Sequence[Question], agent: AgentConfig, top_k: int,
             chat: ChatFormat | None = None) -> ToolEnv:  # fmt: skip
    """A ToolEnv with a search tool per corpus; with `chat`, passages are cut to agent.passage_max_tokens. The
    environment's first search returns `top_k` passages, the agent's own searches agent.search_top_k (or `top_k`)."""
    corpora = sorted({q.corpus for q in questions})
    cut = chat.cutter(agent.passage_max_tokens) if chat is not None else None
    own = agent.own_top_k(top_k)
    return ToolEnv({c: [SearchTool(backend, c, own, cut)] for c in corpora}, agent, first_top_k=top_k)


def searched_prompts(questions: Sequence[Question], chat: ChatFormat, env: ToolEnv,
                     where: SearchedAt = "tool_response") -> list[list[int]]:
    """Each question's prompt with the results of one search, the question as the query, through the agent's own
    search tool (the env's first_search, so they read exactly as an agent's search would). Shown as a finished
    first call ("tool_response": naive RAG's prompt, and the agent's under agent.force_first_search), or above
    the question in the question turn ("question_turn", Search-R1's naive RAG). All of it is prompt, mask 0."""
    results = env.first_search(questions)
    prompts = []
    for q, r in zip(questions, results):
        if where == "question_turn":
            prompts.append(question_turn_prompt(chat, q.question, r.text))
            continue
        ids = chat.prompt_ids(q.question) + chat.encode(call_text(q.question)) + [chat.eos_id]
        prompts.append(ids + list(chat.insert_ids(env.observation(q, r.text), True)))
    return prompts


def question_turn_prompt(chat: ChatFormat, question: str, results: str) -> list[int]:
    """The prompt with a search's results above the question, in the question turn (Search-R1's naive RAG)."""
    messages = initial_messages(question, chat.system_prompt)
    messages[-1]["content"] = f"Search results:\n{results}\n\n{messages[-1]['content']}"
    return chat.encode(render_prompt(chat.tok, messages, chat.tools))
