"""Token log-probs and entropies of a policy on a batch's responses (the update's forward pass)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext

import torch

from components.model.top_layers import below_forward, top_forward
from components.train.local.batch import Batch


def to_front(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Each row i of `x` (B, T, ...) rolled left by shift[i] columns."""
    T = x.shape[1]
    cols = (torch.arange(T, device=x.device)[None] + shift[:, None]) % T
    return x.gather(1, cols.view(*cols.shape, *[1] * (x.dim() - 2)).expand_as(x))


def response_hidden(model, batch: Batch, layers: Sequence[Callable] | None = None) -> torch.Tensor:
    """Hidden states at the positions that predict each response token: (B, R, H).

    Each row runs with its tokens rolled to the front (its prompt's left padding moved behind its response), so
    causal attention needs no padding mask and SDPA's flash kernel skips the blocks above the diagonal. When the
    batch carries a frozen layer's input from the rollout, only the layers from there on run. `layers` stands in
    for the top decoder layers (the trained ones, compiled: train.compile); the layers below run without grad."""
    P, R = batch.prompt_width, batch.responses.shape[1]
    shift = batch.left_padding
    positions = to_front(batch.position_ids, shift)
    dec = model.base_model
    if batch.hidden is not None:
        dtype = next(model.parameters()).dtype
        last = top_forward(dec, to_front(batch.hidden.to(dtype), shift), positions, batch.hidden_layer, layers)
    elif layers is not None:
        first = dec.config.num_hidden_layers - len(layers)
        with torch.no_grad() if first else nullcontext():  # frozen below the trained layers (freeze_below)
            hidden = below_forward(dec, to_front(batch.input_ids, shift), positions, first)
        last = top_forward(dec, hidden, positions, first, layers)
    else:
        last = dec(input_ids=to_front(batch.input_ids, shift), position_ids=positions).last_hidden_state
    # response token j of row i sits at column P - shift[i] + j once rolled; the position before predicts it
    cols = (P - shift - 1)[:, None] + torch.arange(R, device=last.device)[None]
    return last.gather(1, cols[..., None].expand(-1, -1, last.shape[-1]))


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor,
                   entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """(log-prob of each label, entropy of each distribution or None) from fp32 logits (..., V): one log-softmax
    serves both (verl's logprobs_from_logits and entropy_from_logits, which take two logsumexps and a softmax on a
    CPU). The entropy costs an exp and a product over the vocabulary: `entropy=False` skips it."""
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, labels[..., None])[..., 0], -(logp.exp() * logp).sum(-1) if entropy else None


def policy_logprobs(
    model, batch: Batch, temperature: float = 1.0, mask: torch.Tensor | None = None, entropy: bool = True,
    layers: Sequence[Callable] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-prob of each response token, entropy of each position or None without `entropy`), both (B, R).

    With `mask`, the LM head runs only where mask is 1 (e.g. action tokens under the loss mask); 0 elsewhere.
    `layers`: the top decoder layers as the update calls them (response_hidden).
    """
    hidden = response_hidden(model, batch, layers)
    head = model.get_output_embeddings()
    sel = mask.bool() if mask is not None else torch.ones_like(batch.responses, dtype=torch.bool)
    logits = head(hidden[sel]).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp, ent = token_logprobs(logits, batch.responses[sel], entropy)
    zeros = torch.zeros(sel.shape, dtype=logp.dtype, device=logp.device)
    return zeros.masked_scatter(sel, logp), zeros.masked_scatter(sel, ent) if entropy else None
