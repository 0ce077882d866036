"""`grpo_process`: GRPO with process supervision (DeepSeekMath, sec. 4.1.3), registered in verl's estimator registry.

It is `train.algorithm: grpo_process` on both backends: verl's trainer and the local one
(components/train/local/advantages.py) look this function up by its name. verl's outcome GRPO (`train.algorithm:
grpo`) sums `token_level_rewards` to one scalar per response, so a process reward placed on the token closing a tool
call would only add to the total. Here every step keeps its place:

    steps        = the last token of each action segment (response_mask run), plus action tokens carrying a reward
    r~_(i,j)     = (r_(i,j) - mean(R_g)) / (std(R_g) + eps)    R_g: all step rewards of the group (same uid)
    A_(i,t)      = sum of r~_(i,j) over steps j at or after t, on action tokens only

A reward on a non-action token (the outcome of a response cut inside an observation) counts for the last action
token before it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

NAME = "grpo_process"


def step_rewards(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards moved onto step tokens, step mask), both (batch, response_length)."""
    mask = response_mask.bool()
    nxt = torch.zeros_like(mask)
    nxt[:, :-1] = mask[:, 1:]
    steps = mask & (~nxt | (token_level_rewards != 0))
    moved = torch.zeros_like(token_level_rewards)
    carry = torch.zeros(token_level_rewards.shape[0], dtype=token_level_rewards.dtype)
    for t in reversed(range(token_level_rewards.shape[1])):
        r = token_level_rewards[:, t]
        on_step = steps[:, t]
        moved[:, t] = torch.where(on_step, r + carry, torch.zeros_like(r))
        carry = torch.where(on_step, torch.zeros_like(carry), torch.where(mask[:, t], carry, carry + r))
    return moved, steps


@register_adv_est(NAME)
def compute_grpo_process_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    with torch.no_grad():
        rewards, steps = step_rewards(token_level_rewards.float(), response_mask)
        group: dict[Any, list[torch.Tensor]] = defaultdict(list)
        for i in range(rewards.shape[0]):
            group[index[i]].append(rewards[i][steps[i]])
        stats = {}
        for uid, rs in group.items():
            allr = torch.cat(rs)
            if len(rs) == 1 or allr.numel() < 2:
                stats[uid] = (torch.tensor(0.0), torch.tensor(1.0))
            else:
                stats[uid] = (allr.mean(), allr.std() if norm_by_std else torch.tensor(1.0))
        normed = torch.zeros_like(rewards)
        for i in range(rewards.shape[0]):
            mean, std = stats[index[i]]
            normed[i] = torch.where(steps[i], (rewards[i] - mean) / (std + epsilon), 0.0)
        advantages = torch.flip(torch.cumsum(torch.flip(normed, [1]), 1), [1]) * response_mask
    return advantages, advantages
