"""Process rewards placed on tool-call tokens -> token-level advantages, through verl's estimator registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

from components.train.local.grpo_process import NAME, step_rewards

# Two episodes of one question (uid "a") and one of another ("b"); response length 8.
#   a0: call (0-1) | observation (2-3) | answer (4-5) | pad      process 0.5 on 1, outcome 1.0 on 5
#   a1: call (0-2) | observation cut by the length limit (3-4)  process 0.2 on 2, outcome -0.3 on 4 (not an action)
#   b0: answer (0-3)                                             outcome 0.7 on 3
MASK = torch.tensor(
    [
        [1, 1, 0, 0, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
    ]
)
REWARDS = torch.zeros(3, 8)
REWARDS[0, 1], REWARDS[0, 5] = 0.5, 1.0
REWARDS[1, 2], REWARDS[1, 4] = 0.2, -0.3
REWARDS[2, 3] = 0.7
UIDS = np.array(["a", "a", "b"], dtype=object)


def expected_advantages() -> torch.Tensor:
    """DeepSeekMath process supervision written out for this batch."""
    group_a = torch.tensor([0.5, 1.0, 0.2 - 0.3])  # a1's outcome counts for its last action token
    mean, std = group_a.mean(), group_a.std()
    n = lambda r: (r - mean) / (std + 1e-6)  # noqa: E731
    adv = torch.zeros(3, 8)
    adv[0, 0:2] = n(0.5) + n(1.0)
    adv[0, 4:6] = n(1.0)
    adv[1, 0:3] = n(0.2 - 0.3)
    adv[2, 0:4] = 0.7  # a group of one: mean 0, std 1, as in verl's GRPO
    return adv


def test_step_rewards_move_non_action_rewards_back():
    moved, steps = step_rewards(REWARDS, MASK)
    assert steps[0].nonzero().flatten().tolist() == [1, 5]
    assert steps[1].nonzero().flatten().tolist() == [2]
    assert moved[1, 2].item() == pytest.approx(-0.1) and moved[1, 4].item() == 0.0


def test_registered_estimator_gives_expected_token_advantages():
    adv, returns = get_adv_estimator_fn(NAME)(token_level_rewards=REWARDS, response_mask=MASK, index=UIDS)
    torch.testing.assert_close(adv, expected_advantages(), rtol=1e-5, atol=1e-5)
    assert torch.equal(returns, adv)


def test_verl_compute_advantage_dispatches_to_it():
    data = DataProto.from_dict(
        tensors={"token_level_rewards": REWARDS.clone(), "response_mask": MASK.clone()},
        non_tensors={"uid": UIDS},
    )
    out = compute_advantage(data, adv_estimator=NAME, config=AlgoConfig(adv_estimator=NAME))
    torch.testing.assert_close(out.batch["advantages"], expected_advantages(), rtol=1e-5, atol=1e-5)


def test_outcome_grpo_loses_the_placement_reinforce_pp_keeps_it():
    """Why grpo_process exists: verl's grpo/rloo/rf++-baseline see only each response's reward sum."""
    grpo, _ = get_adv_estimator_fn("grpo")(token_level_rewards=REWARDS, response_mask=MASK, index=UIDS)
    assert grpo[0, 0] == grpo[0, 4]  # the same advantage before and after the tool call's reward
    rpp, _ = get_adv_estimator_fn("reinforce_plus_plus")(
        token_level_rewards=REWARDS, response_mask=MASK, config=AlgoConfig(gamma=1.0)
    )
    assert rpp[0, 0] > rpp[0, 4]  # the call's reward counts only for the tokens up to it
