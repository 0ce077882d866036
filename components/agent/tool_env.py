"""ToolEnv: the Agent-R1 environment. Parses each turn, validates and runs tool calls in one batch,
returns the observation, assigns process rewards and the outcome reward, and ends episodes.

Text in, text out: tokenisation and the chat template live in the rollout engine (or verl's agent loop).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import KeysView, Mapping, Sequence
from dataclasses import dataclass, field

from components.agent.observation import error_observation, question_note, shown_results, with_first_read
from components.agent.parser import Action, Answer, Malformed, ToolCall, parse_turn
from components.agent.rewards import exact_match, f1, outcome_reward, process_reward, sub_exact_match, unearned_bonus
from components.agent.tools import Tool, ToolResult, validate_arguments
from components.config import AgentConfig
from components.data.schema import Question


@dataclass
class Episode:
    """The state of one question's conversation."""

    question: Question
    turns: int = 0
    done: bool = False
    answer: str | None = None
    n_calls: int = 0  # tool-call attempts (every non-answer turn)
    n_valid_calls: int = 0
    first_search: str | None = None  # the observation of the environment's own first search (in the prompt)
    first_ids: tuple[str, ...] = ()  # the passages it returned
    first_entries: tuple[str, ...] = ()  # and how they were shown
    calls: list[tuple[bool, tuple[str, ...]]] = field(default_factory=list)  # (valid, passage ids) of each call
    read: dict[str, str] = field(default_factory=dict)  # every passage shown (id -> entry), first shown first
    process_rewards: list[float] = field(default_factory=list)  # one per non-answer turn
    outcome: float = 0.0
    log: list[tuple[str, str]] = field(default_factory=list)  # (role, text) for readable trajectories

    @property
    def em(self) -> float:
        return exact_match(self.answer, self.question.answers)

    @property
    def f1(self) -> float:
        return f1(self.answer, self.question.answers)

    @property
    def seen_ids(self) -> KeysView[str]:
        """The passages the episode was shown."""
        return self.read.keys()

    @property
    def support_recall(self) -> float | None:
        """The share of the question's supporting passages the episode's searches returned (None: it has none)."""
        gold = set(self.question.supporting_ids)
        return len(gold & self.seen_ids) / len(gold) if gold else None

    @property
    def shown(self) -> str:
        """The results the episode was shown, without the question that `agent.observation_question` repeats below
        them."""
        shown = [self.first_search or ""] + [text for role, text in self.log if role == "tool"]
        note = question_note(self.question.question)
        return " ".join(s.removesuffix(note) for s in shown)

    @property
    def answer_seen(self) -> float:
        """1 when a gold answer appears (as whole words) in the results the episode was shown."""
        return sub_exact_match(self.shown, self.question.answers)

    @property
    def total_reward(self) -> float:
        return self.outcome + sum(self.process_rewards)


@dataclass(frozen=True)
class StepResult:
    action: Action
    observation: str | None  # tool-message content for the next turn; None once the episode is done
    reward: float  # process reward of this turn (0.0 for an answer turn; the outcome is on the Episode)
    done: bool


class ToolEnv:
    """`toolsets[corpus]` are the tools an episode on that corpus may call (e.g. a SearchTool on its index)."""

    def __init__(self, toolsets: Mapping[str, Sequence[Tool]], cfg: AgentConfig, first_top_k: int | None = None):
        self.toolsets = {corpus: {t.name: t for t in tools} for corpus, tools in toolsets.items()}
        self.cfg = cfg
        self.first_top_k = first_top_k  # passages of first_search (default: the search tool's own top_k)
        self._first: dict[str, ToolResult] = {}  # question id -> the result of its first search

    def first_search(self, questions: Sequence[Question]) -> list[ToolResult]:
        """Search each question's text before its first turn, one batch per corpus (Agent-R1's forced first
        search; naive RAG's one search). The caller puts the results in the prompts; episodes that reset()
        starts for these questions have their passages already seen, so only new ones earn process rewards."""
        unique = list({q.id: q for q in questions}.values())  # a group's episodes share one search
        by_corpus: dict[str, list[Question]] = defaultdict(list)
        for q in unique:
            if "search" not in self.toolsets.get(q.corpus, {}):
                raise KeyError(f"question {q.id}: no search tool for corpus {q.corpus!r}")
            by_corpus[q.corpus].append(q)
        self._first = {}
        for corpus, qs in by_corpus.items():
            results = self.toolsets[corpus]["search"].execute([{"query": q.question} for q in qs], self.first_top_k)
            self._first.update((q.id, r) for q, r in zip(qs, results))
        return [self._first[q.id] for q in questions]

    def reset(self, question: Question) -> Episode:
        if question.corpus not in self.toolsets:
            raise KeyError(f"question {question.id}: no tools for corpus {question.corpus!r}")
        ep = Episode(question)
        ep.log.append(("user", question.question))
        first = self._first.get(question.id)
        if first is None and self.cfg.force_first_search:
            raise ValueError(f"question {question.id}: agent.force_first_search is on, but its first search was not "
                             "run: build the prompts with components.rollout.episode_setup")  # fmt: skip
        if first is not None:
            ep.first_search, ep.first_ids = self.observation(question, first.text), first.doc_ids
            ep.first_entries = first.entries
            ep.read.update(zip(first.doc_ids, first.entries))
        return ep

    def observation(self, question: Question, results: str) -> str:
        """A search's results as the model is shown them."""
        return shown_results(results, question.question, self.cfg)

    def step(self, episodes: Sequence[Episode], turns: Sequence[str]) -> list[StepResult]:
        """Advance every episode by one model turn; all tool calls run as one batch per tool."""
        if len(episodes) != len(turns):
            raise ValueError(f"{len(episodes)} episodes but {len(turns)} turns")
        actions = [parse_turn(t) for t in turns]
        pending: dict[tuple[str, str], list[int]] = defaultdict(list)
        errors: dict[int, str] = {}
        for i, (ep, action) in enumerate(zip(episodes, actions)):
            if ep.done:
                raise ValueError(f"question {ep.question.id}: episode already done")
            ep.turns += 1
            if isinstance(action, Answer) and self._too_early(ep):
                actions[i] = action = Malformed(f"answer after {self.cfg.min_searches} searches: search again, for "
                                                "what the results have not shown yet")  # fmt: skip
            ep.log.append(("assistant", turns[i]))
            if isinstance(action, ToolCall):
                tool = self.toolsets[ep.question.corpus].get(action.name)
                reason = f"unknown tool {action.name!r}" if tool is None else validate_arguments(tool, action.arguments)
                if reason is None:
                    pending[(ep.question.corpus, action.name)].append(i)
                else:
                    errors[i] = reason
            elif isinstance(action, Malformed):
                errors[i] = action.reason

        results: dict[int, ToolResult] = {}
        for (corpus, name), idx in pending.items():
            outs = self.toolsets[corpus][name].execute([actions[i].arguments for i in idx])  # type: ignore[union-attr]
            results.update(zip(idx, outs))

        return [self._finish_turn(ep, a, results.get(i), errors.get(i)) for i, (ep, a) in enumerate(zip(episodes, actions))]

    def _too_early(self, ep: Episode) -> bool:
        """An answer before `agent.min_searches` own searches, with a turn left to search in."""
        return ep.n_valid_calls < self.cfg.min_searches and ep.turns < self.cfg.max_turns

    def _finish_turn(self, ep: Episode, action: Action, result: ToolResult | None, error: str | None) -> StepResult:
        w = self.cfg.reward
        if isinstance(action, Answer):
            ep.answer, ep.done = action.text, True
            ep.outcome = outcome_reward(ep.answer, ep.question.answers, w)
            ep.outcome -= unearned_bonus(ep.process_rewards, ep.answer, ep.question.answers, w)
            return StepResult(action, None, 0.0, True)
        ep.n_calls += 1
        if result is not None and result.success:
            ep.n_valid_calls += 1
            reward = process_reward(True, result.doc_ids, ep.seen_ids, ep.question.supporting_ids, w)
            ep.calls.append((True, result.doc_ids))
            ep.read.update((i, e) for i, e in zip(result.doc_ids, result.entries) if i not in ep.read)
            text = result.text
            if self.cfg.observation_first_read and result.entries and ep.first_entries:
                text = with_first_read(result.entries, result.doc_ids, ep.first_entries, ep.first_ids)
            observation = self.observation(ep.question, text)
        else:
            reward = process_reward(False, (), ep.seen_ids, ep.question.supporting_ids, w)
            ep.calls.append((False, ()))
            observation = result.text if result is not None else error_observation(error or "invalid turn")
        ep.process_rewards.append(reward)
        ep.log.append(("tool", observation))
        if ep.turns >= self.cfg.max_turns:
            self.truncate(ep)
            return StepResult(action, None, reward, True)
        return StepResult(action, observation, reward, False)

    def truncate(self, ep: Episode) -> None:
        """End an episode without an answer (max turns or max tokens): the format penalty applies, and under a
        `bonus_gate` the call bonuses are given back."""
        ep.done = True
        ep.outcome = outcome_reward(None, ep.question.answers, self.cfg.reward)
        ep.outcome -= unearned_bonus(ep.process_rewards, None, ep.question.answers, self.cfg.reward)
