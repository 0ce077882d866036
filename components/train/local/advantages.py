"""Advantages: verl's estimators over the Agent-R1 advantage mask (process rewards are already in `token_rewards`).

Each train.algorithm resolves to the estimator function the verl backend runs (`estimator_fn`, verl's registry):
grpo is verl's outcome GRPO (a response's rewards summed to one score); grpo_process is the process-supervised
GRPO of components/train/local/grpo_process.py, registered there.

For GAE (PPO) the mask does what Agent-R1 asks: verl's `compute_gae_advantage_return` carries the next value and
advantage across mask-0 tokens, so observation tokens are skipped as if they were not there (tests/
test_rl_advantages.py checks this against GAE on the action tokens cut out). Its output on mask-0 tokens is that
carried value, not 0; it is zeroed here, so a loss over all response tokens gives observations no advantage.
"""

from __future__ import annotations

import numpy as np
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from components.config import VERL_ESTIMATOR, TrainConfig
from components.train.local import grpo_process as _registers_grpo_process  # noqa: F401


def estimator_fn(algorithm: str):
    """The advantage function of a train.algorithm, from verl's estimator registry (as verl's trainer looks it up)."""
    return core_algos.get_adv_estimator_fn(VERL_ESTIMATOR[algorithm])


def compute_advantages(
    cfg: TrainConfig,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (B, R). `mask.advantage` picks action tokens or all response tokens."""
    mask = action_mask if cfg.mask.advantage else response_mask
    fn = estimator_fn(cfg.algorithm)
    if cfg.algorithm == "ppo":
        if values is None:
            raise ValueError("train.algorithm=ppo needs critic values")
        adv, returns = fn(token_level_rewards=token_rewards, values=values, response_mask=mask,
                          gamma=torch.tensor(cfg.gamma), lam=torch.tensor(cfg.lam))  # fmt: skip
        return adv * mask, returns * mask
    algo = AlgoConfig(gamma=cfg.gamma, lam=cfg.lam)
    if cfg.algorithm == "reinforce_plus_plus":
        return fn(token_level_rewards=token_rewards, response_mask=mask, config=algo)
    if cfg.algorithm == "grpo":
        return fn(token_level_rewards=token_rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=True)
    return fn(token_level_rewards=token_rewards, response_mask=mask, index=index, config=algo)


def groups_with_signal(scores: torch.Tensor, index: np.ndarray, tol: float = 1e-6) -> float:
    """The fraction of groups (the rollouts of one question, `index`) whose episode returns `scores` are not all
    equal. A group of equal returns has zero advantage everywhere under a grouped estimator: GRPO learns only
    from the others."""
    values = scores.detach().float().cpu().numpy()
    groups: dict = {}
    for key, v in zip(index.tolist(), values.tolist()):
        groups.setdefault(key, []).append(v)
    if not groups:
        return 0.0
    return sum(max(g) - min(g) > tol for g in groups.values()) / len(groups)


def step_config(cfg: TrainConfig, sampling_entropy: float) -> TrainConfig:
    """The step's TrainConfig: with train.entropy_floor set and the step's sampling entropy (nats per token)
    below it, the entropy bonus grows by train.entropy_floor_coef until exploration recovers."""
    if cfg.entropy_floor is None or sampling_entropy >= cfg.entropy_floor:
        return cfg
    return cfg.model_copy(update={"entropy_coef": cfg.entropy_coef + cfg.entropy_floor_coef})
