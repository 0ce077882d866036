"""The verl estimators we import, and the Agent-R1 advantage mask for GAE (compress, GAE, scatter back)."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from components.config import MaskConfig, TrainConfig
from components.rl.advantages import compress, compute_advantages, masked_gae, scatter_back

ACTION = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 0, 0, 1, 1, 1, 1]], dtype=torch.float32)
RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.float32)


def rewards():
    r = torch.zeros(2, 7)
    r[0, 1], r[0, 5] = 0.2, 1.0  # process reward on a call-closing token, outcome on the last action token
    r[1, 6] = 0.0
    return r


def test_compress_scatter_roundtrip():
    x = torch.arange(14, dtype=torch.float32).reshape(2, 7)
    c, order = compress(x, ACTION)
    assert c[0, :4].tolist() == [0, 1, 4, 5] and c[1, :5].tolist() == [7, 10, 11, 12, 13]
    assert torch.equal(scatter_back(c, order, ACTION), x * ACTION)


def test_masked_gae_equals_gae_on_action_tokens_alone():
    """GAE with the advantage mask = plain GAE on the sequence with the observation tokens cut out."""
    torch.manual_seed(0)
    values, r = torch.randn(2, 7), rewards()
    adv, ret = masked_gae(r, values, ACTION, gamma=0.9, lam=0.8)
    for row in range(2):
        keep = ACTION[row].bool()
        a_ref, r_ref = core_algos.compute_gae_advantage_return(
            r[row, keep][None], values[row, keep][None], torch.ones(1, int(keep.sum())), torch.tensor(0.9), torch.tensor(0.8))
        _, ret_full = core_algos.compute_gae_advantage_return(r, values, ACTION, torch.tensor(0.9), torch.tensor(0.8))
        assert torch.allclose(ret[row, keep], r_ref[0], atol=1e-6)
        assert torch.allclose(ret[row, keep], ret_full[row, keep], atol=1e-6)  # verl's own skip agrees
    assert torch.all(adv[ACTION == 0] == 0) and torch.all(ret[ACTION == 0] == 0)


def test_gae_without_mask_bootstraps_through_observations():
    values, r = torch.randn(2, 7), rewards()
    _, ret_on = masked_gae(r, values, ACTION, 1.0, 0.95)
    _, ret_off = masked_gae(r, values, RESPONSE, 1.0, 0.95)
    assert not torch.allclose(ret_on[0, :2], ret_off[0, :2])


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"])
@pytest.mark.parametrize("mask_on", [True, False])
def test_estimators_respect_the_advantage_mask(algorithm, mask_on):
    cfg = TrainConfig(algorithm=algorithm, mask=MaskConfig(advantage=mask_on), lam=0.95)
    index = np.array(["q", "q"], dtype=object)
    adv, _ = compute_advantages(cfg, rewards(), ACTION, RESPONSE, index, values=torch.zeros(2, 7))
    obs = (RESPONSE == 1) & (ACTION == 0)
    assert torch.all(adv[RESPONSE == 0] == 0)
    if mask_on:
        assert torch.all(adv[obs] == 0)
    else:
        assert torch.any(adv[obs] != 0)


def test_grpo_is_group_normalised_score():
    r = torch.zeros(4, 3)
    r[:, 2] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    mask = torch.ones(4, 3)
    adv, _ = compute_advantages(TrainConfig(algorithm="grpo"), r, mask, mask, np.array(["a", "a", "b", "b"], dtype=object))
    scores = torch.tensor([1.0, 0.0])
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    assert torch.allclose(adv[:2, 0], expected, atol=1e-5)
    assert torch.all(adv[2:] == 0)  # a group with equal rewards carries no signal


def test_ppo_needs_values():
    with pytest.raises(ValueError, match="critic"):
        compute_advantages(TrainConfig(algorithm="ppo"), rewards(), ACTION, RESPONSE, np.array(["q", "q"]), None)


def test_every_algorithm_maps_to_a_registered_verl_estimator():
    from typing import get_args

    from components.config import VERL_ESTIMATOR, Algorithm

    assert set(VERL_ESTIMATOR) == set(get_args(Algorithm))  # one table for both backends, no algorithm left out
    for name in VERL_ESTIMATOR.values():
        assert callable(core_algos.get_adv_estimator_fn(name))
