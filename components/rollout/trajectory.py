"""Trajectory: one episode as tokens, with the Agent-R1 action mask and token-level rewards."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from components.agent.tool_env import Episode


@dataclass
class Trajectory:
    episode: Episode
    prompt_len: int
    input_ids: list[int] = field(default_factory=list)  # prompt + every turn + every insertion
    action_mask: list[int] = field(default_factory=list)  # 1 only on tokens the model generated
    rewards: list[float] = field(default_factory=list)  # process rewards on call-closing tokens, outcome on the last action
    logprobs: list[float] = field(default_factory=list)  # behaviour log-prob of each action token (0 elsewhere)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each model turn
    turn_times: list[tuple[int, int]] = field(default_factory=list)  # wall clock (ns) of each model turn's decode
    tool_times: list[tuple[int, int]] = field(default_factory=list)  # wall clock (ns) of the batched tool step after each turn
    hidden: torch.Tensor | None = None  # (len - 1, H): a frozen layer's input at each position, kept by the rollout

    def add(self, ids, is_action: bool, logprobs=None) -> None:
        self.input_ids.extend(ids)
        self.action_mask.extend([int(is_action)] * len(ids))
        self.rewards.extend([0.0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def response_len(self) -> int:
        return len(self.input_ids) - self.prompt_len

    @property
    def n_action_tokens(self) -> int:
        return sum(self.action_mask)

    def last_action_index(self) -> int:
        return max(i for i, m in enumerate(self.action_mask) if m)


def transcript(t: Trajectory) -> str:
    """Readable trajectory: the question, each call, each observation, the answer and the rewards."""
    ep = t.episode
    lines = [f"Q: {ep.question.question}  (gold: {' | '.join(ep.question.answers)})"]
    if ep.first_search is not None:  # the environment's own search, shown in the prompt
        lines.append(f"{'search*':>9}: {ep.question.question}")
        lines.append(f"{'tool':>9}: {ep.first_search}".replace("\n", "\n           "))
    for role, text in ep.log[1:]:
        lines.append(f"{role:>9}: {text}".replace("\n", "\n           "))
    lines.append(f"   answer: {ep.answer!r}  EM={ep.em:.0f} F1={ep.f1:.2f}  outcome={ep.outcome:+.2f}  "
                 f"process={sum(ep.process_rewards):+.2f}")  # fmt: skip
    return "\n".join(lines)
