"""The verl estimators we import, and the Agent-R1 advantage mask for GAE (verl's GAE over the action mask)."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from components.config import MaskConfig, TrainConfig
from components.train.local.advantages import compute_advantages

ACTION = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 0, 0, 1, 1, 1, 1]], dtype=torch.float32)
RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.float32)


def rewards():
    r = torch.zeros(2, 7)
    r[0, 1], r[0, 5] = 0.2, 1.0  # process reward on a call-closing token, outcome on the last action token
    r[1, 6] = 0.0
    return r


def episodes(seed: int, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (action mask, token rewards, values): rows of different lengths, each several model turns with
    observation gaps between them, process rewards on some action tokens, the outcome on the last one."""
    g = torch.Generator().manual_seed(seed)
    mask, rew = torch.zeros(rows, width), torch.zeros(rows, width)
    for b in range(rows):
        length, pos, action = int(torch.randint(2, width + 1, (1,), generator=g)), 0, True
        while pos < length:
            span = int(torch.randint(1, 8, (1,), generator=g))
            mask[b, pos : min(length, pos + span)] = float(action)
            pos, action = pos + span, not action
        acts = mask[b].nonzero().squeeze(-1)
        rew[b, acts] = torch.randn(len(acts), generator=g) * (torch.rand(len(acts), generator=g) < 0.2)
        rew[b, acts[-1]] += 1.0
    return mask, rew, torch.randn(rows, width, generator=g)


def gae_on_action_tokens_cut_out(rew, values, mask, gamma, lam):
    """The Agent-R1 definition: pack each row's action tokens to the front, GAE (verl's) on that, put them back."""
    packed_r, packed_v, packed_m = (torch.zeros_like(mask) for _ in range(3))
    for b in range(len(mask)):
        keep = mask[b].bool()
        n = int(keep.sum())
        packed_r[b, :n], packed_v[b, :n], packed_m[b, :n] = rew[b, keep], values[b, keep], 1.0
    adv, ret = core_algos.compute_gae_advantage_return(packed_r, packed_v, packed_m, torch.tensor(gamma),
                                                       torch.tensor(lam))  # fmt: skip
    out_adv, out_ret = torch.zeros_like(mask), torch.zeros_like(mask)
    for b in range(len(mask)):
        keep, n = mask[b].bool(), int(mask[b].sum())
        out_adv[b, keep], out_ret[b, keep] = adv[b, :n], ret[b, :n]
    return out_adv, out_ret


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.8), (0.99, 0.95), (0.5, 0.0)])
@pytest.mark.parametrize("seed", range(5))
def test_verl_gae_over_the_mask_is_gae_on_the_action_tokens_cut_out(seed, gamma, lam):
    """Several turns, observation gaps, rows of different lengths. The returns are the same to the last bit. The
    advantages are then whitened over the batch; the same numbers summed in other columns round differently in
    float32 (verl_F.masked_whiten), so they agree to 1e-6, not bit for bit."""
    mask, rew, values = episodes(seed, rows=6, width=40)
    cfg = TrainConfig(algorithm="ppo", gamma=gamma, lam=lam)
    adv, ret = compute_advantages(cfg, rew, mask, torch.ones_like(mask), np.array(["q"] * 6), values)
    ref_adv, ref_ret = gae_on_action_tokens_cut_out(rew, values, mask, gamma, lam)
    assert torch.equal(ret, ref_ret)
    assert torch.allclose(adv, ref_adv, rtol=0, atol=1e-6)
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)


def test_verl_gae_leaves_the_carried_value_on_observation_tokens_which_we_zero():
    """Why compute_advantages multiplies by the mask: verl's output on an observation token is the next action
    token's (carried) advantage and return; with the loss over every response token (train.mask.loss=false)
    that would credit observations."""
    mask, rew, values = episodes(0, rows=4, width=30)
    raw_adv, raw_ret = core_algos.compute_gae_advantage_return(rew, values, mask, torch.tensor(1.0), torch.tensor(0.95))
    obs = (mask == 0) & (torch.arange(30) < mask.nonzero()[:, 1].max())
    assert torch.any(raw_adv[obs] != 0) and torch.any(raw_ret[obs] != 0)
    adv, ret = compute_advantages(TrainConfig(algorithm="ppo", lam=0.95), rew, mask, torch.ones_like(mask),
                                  np.array(["q"] * 4), values)  # fmt: skip
    assert torch.equal(adv, raw_adv * mask) and torch.equal(ret, raw_ret * mask)


def test_gae_without_mask_bootstraps_through_observations():
    values, r = torch.randn(2, 7), rewards()
    on, off = (TrainConfig(algorithm="ppo", lam=0.95, mask=MaskConfig(advantage=a)) for a in (True, False))
    _, ret_on = compute_advantages(on, r, ACTION, RESPONSE, np.array(["q", "q"]), values)
    _, ret_off = compute_advantages(off, r, ACTION, RESPONSE, np.array(["q", "q"]), values)
    assert not torch.allclose(ret_on[0, :2], ret_off[0, :2])


@pytest.mark.parametrize("algorithm", ["grpo", "grpo_process", "rloo", "reinforce_plus_plus",
                                       "reinforce_plus_plus_baseline", "ppo"])  # fmt: skip
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


@pytest.mark.parametrize("process_rewards", [False, True])
def test_each_algorithm_is_one_estimator_on_both_backends(process_rewards):
    """The local trainer calls, for each train.algorithm, the function verl's trainer looks up for the verl
    backend's adv_estimator, with process rewards on or off."""
    from typing import get_args

    from components.config import Algorithm, parse_config
    from components.train.local.advantages import estimator_fn
    from components.train.verl import launch

    for algorithm in get_args(Algorithm):
        cfg = parse_config({"agent": {"reward": {"supporting": 0.5 if process_rewards else 0.0}},
                            "train": {"backend": "verl", "algorithm": algorithm}})  # fmt: skip
        assert estimator_fn(algorithm) is core_algos.get_adv_estimator_fn(launch.estimator(cfg)), algorithm


def test_local_grpo_process_is_the_registered_estimator_and_keeps_the_reward_place():
    index = np.array(["q", "q"], dtype=object)
    proc, _ = compute_advantages(TrainConfig(algorithm="grpo_process"), rewards(), ACTION, RESPONSE, index)
    outcome, _ = compute_advantages(TrainConfig(algorithm="grpo"), rewards(), ACTION, RESPONSE, index)
    assert outcome[0, 0] == outcome[0, 4]  # grpo: one score per episode, the call's reward only adds to it
    assert proc[0, 0] != proc[0, 4]  # grpo_process: the call's reward counts for the tokens up to it
    verl_fn = core_algos.get_adv_estimator_fn("grpo_process")
    expected, _ = verl_fn(token_level_rewards=rewards(), response_mask=ACTION, index=index)
    torch.testing.assert_close(proc, expected)


def test_groups_with_signal_counts_groups_of_unequal_returns():
    from components.train.local.advantages import groups_with_signal

    index = np.array(["a", "a", "b", "b", "c", "c", "d", "d"], dtype=object)
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, -0.1, -0.1, 0.5, 0.5000001])
    assert groups_with_signal(scores, index) == pytest.approx(0.25)  # only b (d is within the tolerance)
    assert groups_with_signal(torch.zeros(0), np.array([], dtype=object)) == 0.0


def test_entropy_floor_adds_the_bonus_only_below_the_floor():
    from components.train.local.advantages import step_config

    tc = TrainConfig(entropy_coef=0.001, entropy_floor=0.5, entropy_floor_coef=0.01)
    assert step_config(tc, 0.7) is tc
    assert step_config(tc, 0.3).entropy_coef == pytest.approx(0.011)
    assert step_config(TrainConfig(), 0.0).entropy_coef == 0.0  # no floor: never on


@pytest.mark.parametrize("algorithm,same", [("grpo", True), ("rloo", True), ("reinforce_plus_plus", False),
                                            ("reinforce_plus_plus_baseline", False), ("ppo", False)])  # fmt: skip
def test_which_estimators_the_advantage_mask_changes_on_action_tokens(algorithm, same):
    """GRPO and RLOO give every token of an episode its group-normalised return, so on the action tokens (all that
    the loss mask keeps) the advantage is the same with the advantage mask off: that ablation arm trains exactly as
    the full one. GAE bootstraps through observation tokens and REINFORCE++ whitens over them, so for those it
    changes the update."""
    index = np.array(["q", "q", "q", "q"], dtype=object)
    mask, rew, values = episodes(seed=3, rows=4, width=24)
    response = torch.zeros_like(mask)
    for b in range(len(mask)):
        response[b, : int(mask[b].nonzero().max()) + 1] = 1.0
    on = TrainConfig(algorithm=algorithm, mask=MaskConfig(advantage=True), lam=0.95, gamma=0.99)
    off = on.model_copy(update={"mask": MaskConfig(advantage=False)})
    adv_on, _ = compute_advantages(on, rew, mask, response, index, values)
    adv_off, _ = compute_advantages(off, rew, mask, response, index, values)
    acts = mask.bool()
    assert torch.any(adv_on[acts] != 0)
    assert torch.equal(adv_on[acts], adv_off[acts]) is same
