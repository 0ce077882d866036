"""The decoder from one layer on, given that layer's input: what an update runs when the layers below it are frozen
and their output was kept from the rollout (they compute the same function of the tokens at every step)."""

from __future__ import annotations

import torch
from transformers.masking_utils import create_causal_mask


def frozen_layers(model, trainable_layers: int | None) -> int:
    """How many decoder layers from the bottom an update never changes (0 when every layer trains)."""
    if trainable_layers is None:
        return 0
    return max(0, model.config.num_hidden_layers - trainable_layers)


def top_forward(dec, hidden: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                first_layer: int) -> torch.Tensor:  # fmt: skip
    """The final-norm hidden states of decoder `dec`'s layers `first_layer`.. on `hidden`, their input (B, T, H)."""
    types = set(getattr(dec.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise NotImplementedError(f"top_forward supports full-attention decoders only, not {sorted(types)}")
    mask = create_causal_mask(config=dec.config, inputs_embeds=hidden, attention_mask=attention_mask,
                              past_key_values=None, position_ids=position_ids)  # fmt: skip
    position_embeddings = dec.rotary_emb(hidden, position_ids=position_ids)
    for layer in dec.layers[first_layer : dec.config.num_hidden_layers]:
        hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings, position_ids=position_ids)
    return dec.norm(hidden)
