"""Token log-probs and the losses of one update, through verl's core_algos (policy loss, agg_loss, KL, value loss)."""

from __future__ import annotations

import torch
import verl.utils.torch_functional as verl_F
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from components.config import TrainConfig
from components.model.top_layers import top_forward
from components.rl.batch import Batch


def response_hidden(model, batch: Batch) -> torch.Tensor:
    """Hidden states at the positions that predict each response token: (B, R, H). When the batch carries a
    frozen layer's input from the rollout, only the layers from there on run."""
    P, R = batch.prompt_width, batch.responses.shape[1]
    if batch.hidden is not None:
        dtype = next(model.parameters()).dtype
        last = top_forward(model.base_model, batch.hidden.to(dtype), batch.attention_mask, batch.position_ids,
                           batch.hidden_layer)  # fmt: skip
        return last[:, P - 1 : P + R - 1]
    out = model.base_model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
    )
    return out.last_hidden_state[:, P - 1 : P + R - 1]


def policy_logprobs(
    model, batch: Batch, temperature: float = 1.0, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of each response token, entropy of each position), both (B, R).

    With `mask`, the LM head runs only where mask is 1 (e.g. action tokens under the loss mask); 0 elsewhere.
    """
    hidden = response_hidden(model, batch)
    head = model.get_output_embeddings()
    if mask is None:
        logits = head(hidden).float() / temperature
        return verl_F.logprobs_from_logits(logits, batch.responses), verl_F.entropy_from_logits(logits)
    sel = mask.bool()
    logits = head(hidden[sel]).float() / temperature
    logp = torch.zeros(mask.shape, dtype=logits.dtype, device=logits.device)
    entropy = torch.zeros_like(logp)
    # As one [1, N, V] row: verl's CPU path (logprobs_from_logits_v2) loops over the first dimension, one logsumexp
    # and its backward per token when given [N, V].
    logp = logp.masked_scatter(sel, verl_F.logprobs_from_logits(logits[None], batch.responses[sel][None])[0])
    entropy = entropy.masked_scatter(sel, verl_F.entropy_from_logits(logits))
    return logp, entropy


def policy_loss(
    cfg: TrainConfig,
    old_logp: torch.Tensor,
    logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    batch_num_tokens: int,
    global_batch_size: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate (verl "vanilla"), normalised over the whole step's batch for grad accumulation."""
    actor = OmegaConf.create(
        {
            "clip_ratio": cfg.clip_ratio,
            "clip_ratio_low": cfg.clip_ratio,
            "clip_ratio_high": cfg.clip_ratio,
            "clip_ratio_c": 3.0,
            "global_batch_info": {"batch_num_tokens": batch_num_tokens, "global_batch_size": global_batch_size},
        }
    )
    fn = core_algos.get_policy_loss_fn("vanilla")
    return fn(old_logp, logp, advantages, loss_mask, cfg.loss_agg_mode, actor, None)


def aggregate(cfg: TrainConfig, values: torch.Tensor, mask: torch.Tensor, batch_num_tokens: int, global_batch_size: int):
    return core_algos.agg_loss(
        values, mask, cfg.loss_agg_mode, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size
    )


def kl_to_reference(cfg: TrainConfig, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return core_algos.kl_penalty(logp, ref_logp, cfg.kl_penalty)


def value_loss(cfg: TrainConfig, vpreds, returns, old_values, mask, batch_num_tokens, global_batch_size):
    return core_algos.compute_value_loss(
        vpreds, returns, old_values, mask, cfg.value_clip, cfg.loss_agg_mode,
        batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size,
    )  # fmt: skip


def micro_batch_loss(
    cfg: TrainConfig,
    logp: torch.Tensor,
    entropy: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    batch_num_tokens: int,
    global_batch_size: int,
    ref_logp: torch.Tensor | None = None,
    value_terms: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one micro-batch: clipped policy loss - entropy bonus + KL to the reference + value loss.

    `value_terms` is (predicted values, returns, old values) for PPO's critic. Returns the loss and its terms as
    floats: pg_loss, ppo_kl, pg_clipfrac, and kl_ref / value_loss when present."""
    pg, pg_metrics = policy_loss(cfg, old_logp, logp, advantages, mask, batch_num_tokens, global_batch_size)
    loss = pg
    terms = {"pg_loss": float(pg.detach()), "ppo_kl": pg_metrics["actor/ppo_kl"],
             "pg_clipfrac": pg_metrics["actor/pg_clipfrac"]}  # fmt: skip
    if cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * aggregate(cfg, entropy, mask, batch_num_tokens, global_batch_size)
    if ref_logp is not None:
        kl = aggregate(cfg, kl_to_reference(cfg, logp, ref_logp), mask, batch_num_tokens, global_batch_size)
        loss = loss + cfg.kl_coef * kl
        terms["kl_ref"] = float(kl.detach())
    if value_terms is not None:
        vf, _ = value_loss(cfg, *value_terms, mask, batch_num_tokens, global_batch_size)
        loss = loss + vf
        terms["value_loss"] = float(vf.detach())
    return loss, terms
