"""The update's clipped objective is verl's "vanilla" policy loss, to the last bit: loss, metrics and gradient."""

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from components.train.local.update import DUAL_CLIP, clipped_objective


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_the_clipped_objective_is_verls_vanilla_policy_loss(mode):
    gen = torch.Generator().manual_seed(0)
    B, R, clip = 6, 9, 0.2
    old = -torch.rand(B, R, generator=gen) * 3
    logp = old + torch.randn(B, R, generator=gen) * 0.5  # ratios far outside 1 +- clip, both ways
    logp[0, 0] = old[0, 0] + 30.0  # beyond the log-ratio clamp
    adv = torch.randn(B, R, generator=gen) * 2
    adv[0, 0] = -1.0  # a negative advantage at a huge ratio: the dual clip bounds its loss
    mask = (torch.rand(B, R, generator=gen) > 0.3).float()
    mask[-1] = 0  # a row the mask hides entirely
    n_tokens, n_seqs = int(mask.sum()) + 5, B + 2  # whole-batch counts, as a micro-batch sees them

    mine, theirs = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    losses, ppo_kl, clipfrac = clipped_objective(mine, old, adv, mask, clip)
    loss = core_algos.agg_loss(losses, mask, mode, batch_num_tokens=n_tokens, global_batch_size=n_seqs)
    actor = OmegaConf.create({"clip_ratio": clip, "clip_ratio_low": clip, "clip_ratio_high": clip,
                              "clip_ratio_c": DUAL_CLIP,
                              "global_batch_info": {"batch_num_tokens": n_tokens,
                                                    "global_batch_size": n_seqs}})  # fmt: skip
    want, metrics = core_algos.get_policy_loss_fn("vanilla")(old, theirs, adv, mask, mode, actor, None)
    assert torch.equal(loss, want)
    assert float(ppo_kl) == metrics["actor/ppo_kl"] and float(clipfrac) == metrics["actor/pg_clipfrac"]
    assert 0 < float(clipfrac) < 1  # some tokens were clipped, some not
    loss.backward()
    want.backward()
    assert torch.equal(mine.grad, theirs.grad) and torch.count_nonzero(mine.grad) > 0
