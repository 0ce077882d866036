"""One RL update, top to bottom (as CleanRL's ppo.py): the masks, advantages, the behaviour log-probs, then
`ppo_epochs` passes over micro-batches (ratio, clipped objective, entropy bonus, KL to the reference, value loss;
gradients accumulate), each pass ending in one guarded optimizer step.

The advantage estimators, the loss aggregation, the KL penalty and the value loss are verl's pure functions
(verl.trainer.ppo.core_algos); the clipped objective is verl's "vanilla" policy loss written out
(tests/test_rl_update.py checks it against verl's, bit for bit). Every loss is normalised by the whole batch's token
and sequence counts, so the micro-batches' gradients add up to the gradient over the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import verl.utils.torch_functional as verl_F
from torch import nn
from verl.trainer.ppo import core_algos

from components.config import TrainConfig
from components.train.local.advantages import compute_advantages
from components.train.local.batch import Batch
from components.train.local.critic import Critic
from components.train.local.losses import policy_logprobs

DUAL_CLIP = 3.0  # verl's clip_ratio_c: the loss of a negative advantage is at most DUAL_CLIP x |A| (dual-clip PPO)
MAX_LOG_RATIO = 20.0  # verl clamps the log-ratio to this, for stability


@dataclass(frozen=True)
class Learner:
    """What an update changes (the policy, PPO's critic, their optimizers) and reads (the frozen reference)."""

    policy: nn.Module
    trainable: list[nn.Parameter]  # the policy's parameters the optimizer steps (train.trainable_layers)
    opt: torch.optim.Optimizer
    ref: nn.Module | None = None  # train.kl_coef > 0
    critic: Critic | None = None  # train.algorithm: ppo
    critic_opt: torch.optim.Optimizer | None = None
    layers: Sequence[Callable] | None = None  # the trained decoder layers compiled (train.compile); None: eager


def update(learner: Learner, batch: Batch, tc: TrainConfig,
           amp: Callable[[], AbstractContextManager] = nullcontext) -> dict[str, float]:  # fmt: skip
    """One update of `learner` on a step's batch under the step's config `tc`; its metrics (epoch means)."""
    policy, ref, critic = learner.policy, learner.ref, learner.critic

    # The loss mask: the tokens the loss sees, the agent's own (action mask) or every response token. The advantage
    # mask (train.mask.advantage) picks the tokens the estimator runs over, inside compute_advantages.
    loss_mask = batch.action_mask if tc.mask.loss else batch.response_mask
    n_tokens, n_seqs = int(loss_mask.sum()), len(batch)

    # Advantages: verl's estimator of train.algorithm; PPO's GAE needs the critic's values from before the update.
    values = critic_values(critic, batch, tc.micro_batch_size, amp) if critic is not None else None
    adv, returns = compute_advantages(tc, batch.token_rewards, batch.action_mask, batch.response_mask, batch.index,
                                      values)  # fmt: skip

    # Micro-batches. Rows of all-zero advantage add exactly zero to the gradient when nothing else in the loss
    # needs them (no entropy bonus, reference KL or critic): they are left out.
    needs_all = critic is not None or ref is not None or bool(tc.entropy_coef)
    rows = torch.arange(n_seqs) if needs_all else rows_with_signal(adv, loss_mask)
    parts = [(mb, *batch.trimmed(mb)) for mb in micro_batches(batch, rows, tc.micro_batch_size)]  # (rows, b, width)

    # The behaviour policy's log-probs. With one epoch the policy has not moved yet: its own (detached) are them.
    old_logp = (behaviour_logprobs(policy, batch, parts, loss_mask, tc.temperature, amp, learner.layers)
                if tc.ppo_epochs > 1 else None)  # fmt: skip

    policy.train()
    sums = {"pg_loss": 0.0, "ppo_kl": 0.0, "pg_clipfrac": 0.0}  # epoch sums
    if ref is not None:
        sums["kl_ref"] = 0.0
    if critic is not None:
        sums["value_loss"] = 0.0
    skipped = 0
    for _epoch in range(tc.ppo_epochs):
        zero_grad(learner)
        finite = True
        for mb, b, r in parts:
            mask = loss_mask[mb, :r]
            aggregate = partial(core_algos.agg_loss, loss_mask=mask, loss_agg_mode=tc.loss_agg_mode,
                                batch_num_tokens=n_tokens, global_batch_size=n_seqs)  # one token matrix -> the loss

            # forward passes: the policy, the frozen reference, the critic
            with amp():
                logp, entropy = policy_logprobs(policy, b, tc.temperature, mask, bool(tc.entropy_coef), learner.layers)
            if ref is not None:
                with torch.no_grad(), amp():
                    ref_logp, _ = policy_logprobs(ref, b, tc.temperature, mask, entropy=False)
            if critic is not None:
                with amp():
                    vpred = critic.values(b)

            # the loss: clipped objective - entropy bonus + KL to the reference + value loss
            old = old_logp[mb, :r] if old_logp is not None else logp.detach()
            pg_losses, ppo_kl, clipfrac = clipped_objective(logp, old, adv[mb, :r], mask, tc.clip_ratio)
            pg_loss = aggregate(pg_losses)
            loss = pg_loss
            if tc.entropy_coef:
                loss = loss - tc.entropy_coef * aggregate(entropy)
            if ref is not None:  # train.kl_on=wrong: only the episodes whose answer is wrong (DGPO)
                on = 1 - b.right[:, None] if tc.kl_on == "wrong" else 1
                kl = aggregate(core_algos.kl_penalty(logp, ref_logp, tc.kl_penalty) * on)
                loss = loss + tc.kl_coef * kl
                sums["kl_ref"] += float(kl.detach())
            if critic is not None:
                vf_loss, _ = core_algos.compute_value_loss(vpred, returns[mb, :r], values[mb, :r], mask, tc.value_clip,
                                                           tc.loss_agg_mode, batch_num_tokens=n_tokens,
                                                           global_batch_size=n_seqs)  # fmt: skip
                loss = loss + vf_loss
                sums["value_loss"] += float(vf_loss.detach())
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            sums["pg_loss"] += float(pg_loss.detach())
            sums["ppo_kl"] += float(ppo_kl) * len(b) / n_seqs
            sums["pg_clipfrac"] += float(clipfrac) * len(b) / n_seqs

        # One guarded step: a loss or gradient norm that is not finite drops the epoch's gradients, no step.
        if not parts:  # nothing to learn from: the step AdamW takes on an all-zero gradient
            for p in learner.trainable:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(learner.trainable, tc.max_grad_norm) if finite else None
        if grad_norm is None or not torch.isfinite(grad_norm):
            zero_grad(learner)
            skipped += 1
            continue
        learner.opt.step()
        if critic is not None:
            torch.nn.utils.clip_grad_norm_(critic.parameters(), tc.max_grad_norm)
            learner.critic_opt.step()
        sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm)

    epochs = max(1, tc.ppo_epochs - skipped)
    out = {k: v / epochs for k, v in sums.items()}
    out["skipped_nonfinite"] = float(skipped)
    out["updated_fraction"] = len(rows) / n_seqs
    out["advantage_abs"] = float((adv.abs() * loss_mask).sum() / loss_mask.sum().clamp(min=1))
    return out


def clipped_objective(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                      clip: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """PPO's clipped surrogate, per token (verl's "vanilla" policy loss before its aggregation, dual clip included);
    with the k1 estimate of KL(old || new) and the fraction of clipped tokens, both over `mask`."""
    log_ratio = torch.clamp(logp - old_logp, min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    ppo_kl = verl_F.masked_mean(-log_ratio, mask)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - clip, 1 + clip)
    losses = torch.maximum(unclipped, clipped)
    clipfrac = verl_F.masked_mean(torch.gt(clipped, unclipped).float(), mask)
    losses = torch.where(adv < 0, torch.min(-adv * DUAL_CLIP, losses), losses)
    return losses, ppo_kl.detach(), clipfrac.detach()


def rows_with_signal(adv: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """The rows with a non-zero advantage under the loss mask (early in GRPO most groups score all alike)."""
    return torch.nonzero(((adv * loss_mask) != 0).any(-1)).squeeze(-1).cpu()


def micro_batches(batch: Batch, rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """`rows` in micro-batches of `size`, longest first, so that rows of similar length share one: each is trimmed
    to its own width, at a fraction of the padded compute."""
    lengths = batch.attention_mask[rows].sum(-1).cpu()  # row indices stay on the CPU: they index numpy too
    order = rows[torch.argsort(lengths, descending=True, stable=True)]
    return [order[i : i + size] for i in range(0, len(order), size)]


@torch.no_grad()
def critic_values(critic: Critic, batch: Batch, size: int, amp: Callable[[], AbstractContextManager]) -> torch.Tensor:
    """The critic's value of every response position, before the update: (B, R)."""
    values = torch.zeros_like(batch.response_mask)
    for mb in micro_batches(batch, torch.arange(len(batch)), size):
        b, r = batch.trimmed(mb)
        with amp():
            values[mb, :r] = critic.values(b)
    return values


@torch.no_grad()
def behaviour_logprobs(policy: nn.Module, batch: Batch, parts: list, loss_mask: torch.Tensor, temperature: float,
                       amp: Callable[[], AbstractContextManager], layers: Sequence[Callable] | None = None,
                       ) -> torch.Tensor:  # fmt: skip
    """The policy's log-probs before the first of several epochs moves it: (B, R), 0 off the loss mask."""
    old_logp = torch.zeros_like(batch.response_mask)
    for mb, b, r in parts:
        with amp():
            old_logp[mb, :r] = policy_logprobs(policy, b, temperature, loss_mask[mb, :r], False, layers)[0]
    return old_logp


def zero_grad(learner: Learner) -> None:
    learner.opt.zero_grad(set_to_none=True)
    if learner.critic_opt is not None:
        learner.critic_opt.zero_grad(set_to_none=True)
