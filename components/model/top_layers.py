"""The decoder from one layer on, given that layer's input: what an update runs when the layers below it are frozen
and their output was kept from the rollout (they compute the same function of the tokens at every step)."""

from __future__ import annotations

import torch


def frozen_layers(model, trainable_layers: int | None) -> int:
    """How many decoder layers from the bottom an update never changes (0 when every layer trains)."""
    if trainable_layers is None:
        return 0
    return max(0, model.config.num_hidden_layers - trainable_layers)


def top_forward(dec, hidden: torch.Tensor, position_ids: torch.Tensor, first_layer: int) -> torch.Tensor:
    """The final-norm hidden states of decoder `dec`'s layers `first_layer`.. on `hidden`, their input (B, T, H).
    Causal attention with no padding mask: each row's tokens must start at column 0 (padding only on the right)."""
    types = set(getattr(dec.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise NotImplementedError(f"top_forward supports full-attention decoders only, not {sorted(types)}")
    position_embeddings = dec.rotary_emb(hidden, position_ids=position_ids)
    for layer in dec.layers[first_layer : dec.config.num_hidden_layers]:
        hidden = layer(hidden, attention_mask=None, position_embeddings=position_embeddings, position_ids=position_ids)
    return dec.norm(hidden)
