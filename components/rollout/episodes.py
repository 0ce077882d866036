"""What both rollout engines share: the run's statistics, starting episodes, and recording a model turn.

A turn is recorded the same way whoever generated it (rollout/engine.py on transformers, rollout/vllm_engine.py on
vLLM): its tokens get action mask 1 and their log-probs, the process reward sits on the token that closes its tool
call, the environment's insertion gets mask 0, and the outcome goes on the last action token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from components.agent.tool_env import StepResult, ToolEnv
from components.config import AgentConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.trajectory import Trajectory

PHASES = ("prefill", "decode", "sample", "bookkeeping", "tools")


@dataclass
class RolloutStats:
    seconds: float = 0.0
    tool_seconds: float = 0.0
    generated_tokens: int = 0
    prefill_tokens: int = 0  # prompt and observation tokens computed (a shared history once; vLLM: prefix-cache misses)
    forward_calls: int = 0
    decode_steps: int = 0
    row_steps: int = 0  # rows computed over all decode steps (idle rows included)
    fed_rows: int = 0  # rows that fed a token over all decode steps
    compactions: int = 0  # times the cache shrank to its busy rows (RolloutConfig.compact_fraction)
    entropy_sum: float = 0.0  # of the sampling distribution, over every sampled token
    phase_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @property
    def entropy(self) -> float:
        return self.entropy_sum / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


def start_trajectories(chat: ChatFormat, env: ToolEnv, questions: Sequence[Question],
                       prompts: Sequence[list[int]] | None, prefill: str) -> list[Trajectory]:
    """One new episode per question: its prompt (rendered, or given) and any prefill, all with mask 0."""
    prefill_ids = chat.encode(prefill) if prefill else []
    trajs = []
    for n, q in enumerate(questions):
        prompt = list(prompts[n]) if prompts is not None else chat.prompt_ids(q.question)
        t = Trajectory(env.reset(q), prompt_len=len(prompt))
        t.add(prompt, is_action=False)
        t.add(prefill_ids, is_action=False)
        trajs.append(t)
    return trajs


Span = tuple[int, int]


def record_turn(t: Trajectory, tokens: list[int], logprobs: list[float], times: tuple[Span, Span], res: StepResult,
                chat: ChatFormat, env: ToolEnv, cfg: AgentConfig, prefill_ids: list[int]) -> tuple[int, ...] | None:
    """Append a model turn (mask 1), its (decode, tool) wall-clock times and process reward; then the environment's
    insertion (mask 0), returned to be fed, if the episode goes on and fits in `max_total_tokens`; else the
    outcome on the last action token."""
    start = len(t.input_ids)
    t.add(tokens, is_action=True, logprobs=logprobs)
    t.turn_spans.append((start, len(t.input_ids)))
    t.turn_times.append(times[0])
    t.tool_times.append(times[1])
    if res.reward:
        t.rewards[_closing_index(t, start, chat.tool_close_id)] += res.reward
    if not res.done:
        insert = chat.insert_ids(res.observation, chat.ended_with_eos(tokens)) + tuple(prefill_ids)
        if len(t.input_ids) + len(insert) + 1 <= cfg.max_total_tokens:
            t.add(insert, is_action=False)
            return insert
        env.truncate(t.episode)
    t.rewards[t.last_action_index()] += t.episode.outcome
    return None


def _closing_index(t: Trajectory, start: int, tool_close_id: int | None) -> int:
    """The token that closes the turn's tool call (`</tool_call>`), else the turn's last token."""
    end = len(t.input_ids)
    if tool_close_id is not None:
        for j in range(start, end):
            if t.input_ids[j] == tool_close_id:
                return j
    return end - 1
