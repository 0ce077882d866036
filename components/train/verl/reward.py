"""verl's `custom_reward_function`: the outcome reward of one episode, from the project's rewards module.

verl decodes the whole response (model turns and observations) and calls `compute_score`; the score lands on the
last response token. Process rewards are not computed here: the search tool returns them per call and the agent
loop places them on the token closing each call (agent_loop.py).
"""

from __future__ import annotations

from typing import Any

from components.agent.parser import ANSWER_OPEN, Answer, parse_turn
from components.agent.rewards import exact_match, f1, outcome_reward
from components.config import RewardConfig

# The reward_kwargs verl passes through from params (launch.py); the rest of RewardConfig is for process rewards.
OUTCOME_KEYS = ("answer_metric", "answer_format", "format_penalty")


def final_answer(solution_str: str) -> str | None:
    """The answer of the last `<answer>` in the response. Observations are escaped, so it is the model's own."""
    start = solution_str.rfind(ANSWER_OPEN)
    if start < 0:
        return None
    action = parse_turn(solution_str[start:])
    return action.text if isinstance(action, Answer) else None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """{"score": outcome reward, "em", "f1", "answered"}; verl keeps the extra keys as reward_extra_info."""
    golds = [ground_truth] if isinstance(ground_truth, str) else [str(g) for g in ground_truth]
    if not golds:
        raise ValueError(f"data_source {data_source!r}: empty ground_truth")
    weights = RewardConfig(**{k: kwargs[k] for k in OUTCOME_KEYS if k in kwargs})
    answer = final_answer(solution_str)
    return {
        "score": float(outcome_reward(answer, golds, weights)),
        "em": exact_match(answer, golds),
        "f1": f1(answer, golds),
        "answered": float(answer is not None),
    }
