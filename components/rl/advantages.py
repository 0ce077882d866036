"""Advantages: verl's estimators, plus what verl lacks (token-level process rewards are already in
`token_rewards`; here: the Agent-R1 advantage mask for GAE: compress action tokens, run GAE, scatter back)."""

from __future__ import annotations

import numpy as np
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from components.config import VERL_ESTIMATOR, TrainConfig


def compress(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move the masked entries of each row to its front, in order. Returns (compressed, order)."""
    # stable sort of (1 - mask) puts mask==1 columns first without reordering them
    order = torch.sort((1 - mask).to(torch.int8), dim=-1, stable=True).indices
    return x.gather(-1, order), order


def scatter_back(y: torch.Tensor, order: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(y).scatter(-1, order, y)
    return out * mask


def masked_gae(
    token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the tokens in `mask` only, as if the rest (observations) were not there."""
    r, order = compress(token_rewards, mask)
    v, _ = compress(values, mask)
    m, _ = compress(mask, mask)
    adv, ret = core_algos.compute_gae_advantage_return(r * m, v * m, m, torch.tensor(gamma), torch.tensor(lam))
    return scatter_back(adv, order, mask), scatter_back(ret, order, mask)


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
    if cfg.algorithm == "ppo":
        if values is None:
            raise ValueError("train.algorithm=ppo needs critic values")
        return masked_gae(token_rewards, values, mask, cfg.gamma, cfg.lam)
    fn = core_algos.get_adv_estimator_fn(VERL_ESTIMATOR[cfg.algorithm])
    algo = AlgoConfig(gamma=cfg.gamma, lam=cfg.lam)
    if cfg.algorithm == "reinforce_plus_plus":
        return fn(token_level_rewards=token_rewards, response_mask=mask, config=algo)
    if cfg.algorithm == "grpo":
        return fn(token_level_rewards=token_rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=True)
    return fn(token_level_rewards=token_rewards, response_mask=mask, index=index, config=algo)
