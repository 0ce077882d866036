"""The Agent-R1 loss mask: with it on, observation tokens get exactly zero gradient; with it off they don't."""

import copy

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss

from components.config import MaskConfig, TrainConfig
from components.train.local.advantages import compute_advantages
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs
from components.train.local.update import clipped_objective
from tests.toy import make_toy
from components.rollout.engine import rollout


@pytest.fixture(scope="module")
def batch_and_model(tmp_path_factory):
    toy = make_toy(tmp_path_factory.mktemp("toy"), seed=1)
    qs = toy.world.questions("train")[:4] * 2
    trajs = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, generator=torch.Generator().manual_seed(0))
    trajs[0].rewards[trajs[0].last_action_index()] += 1.0  # make sure the group has signal
    return collate(trajs, toy.chat.pad_id), toy.model


@pytest.mark.parametrize("mask_on", [True, False])
def test_observation_tokens_gradient(batch_and_model, mask_on):
    batch, model = batch_and_model
    cfg = TrainConfig(mask=MaskConfig(loss=mask_on, advantage=mask_on))
    adv, _ = compute_advantages(cfg, batch.token_rewards, batch.action_mask, batch.response_mask, batch.index)
    logp, _ = policy_logprobs(model, batch)
    logp.retain_grad()
    loss_mask = batch.action_mask if mask_on else batch.response_mask
    losses, _, _ = clipped_objective(logp, logp.detach(), adv, loss_mask, cfg.clip_ratio)
    loss = agg_loss(losses, loss_mask, cfg.loss_agg_mode, batch_num_tokens=int(loss_mask.sum()),
                    global_batch_size=len(batch))
    model.zero_grad()
    loss.backward()
    observation = (batch.response_mask == 1) & (batch.action_mask == 0)
    assert observation.any() and batch.action_mask.any()
    if mask_on:
        assert torch.count_nonzero(logp.grad[observation]) == 0  # exactly zero, not just small
    else:
        assert torch.count_nonzero(logp.grad[observation]) > 0
    assert torch.count_nonzero(logp.grad[batch.action_mask == 1]) > 0
    assert np.isfinite(loss.item())


def test_a_trimmed_micro_batch_scores_its_rows_like_the_whole_batch(tmp_path):
    """The trainer cuts each micro-batch to its own width; positions are kept, so log-probs do not change."""
    toy = make_toy(tmp_path, seed=1)
    qs = toy.world.questions("train")[:3]
    trajs = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, generator=torch.Generator().manual_seed(0))
    short = copy.deepcopy(trajs[1])
    keep = short.prompt_len + 3
    for name in ("input_ids", "action_mask", "rewards", "logprobs"):
        setattr(short, name, getattr(short, name)[:keep])
    batch = collate(trajs + [short], toy.chat.pad_id)
    with torch.no_grad():
        full, _ = policy_logprobs(toy.model, batch)
        rows = torch.tensor([len(trajs)])
        part, r = batch.trimmed(rows)
        trimmed, _ = policy_logprobs(toy.model, part)
    assert r == 3 and part.input_ids.shape[1] < batch.input_ids.shape[1]
    assert torch.allclose(trimmed[0, :r], full[len(trajs), :r], atol=1e-5)
    assert torch.equal(part.action_mask, batch.action_mask[rows, :r])
