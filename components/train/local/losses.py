"""Token log-probs and entropies of a policy on a batch's responses (the update's forward pass)."""

from __future__ import annotations

import torch
import verl.utils.torch_functional as verl_F

from components.model.top_layers import top_forward
from components.train.local.batch import Batch


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
