"""The decoder from one layer on, given that layer's input: what an update runs when the layers below it are frozen
and their output was kept from the rollout (they compute the same function of the tokens at every step)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def frozen_layers(model, trainable_layers: int | None) -> int:
    """How many decoder layers from the bottom an update never changes (0 when every layer trains)."""
    if trainable_layers is None:
        return 0
    return max(0, model.config.num_hidden_layers - trainable_layers)


def compiled_layers(model, trainable_layers: int | None) -> list[Callable]:
    """The decoder layers an update trains, each behind torch.compile with dynamic shapes: the same parameters, while
    the modules themselves stay eager for the rollouts that decode through them."""
    dec = model.get_decoder()
    return [torch.compile(layer, dynamic=True) for layer in dec.layers[frozen_layers(model, trainable_layers) :]]


def top_forward(dec, hidden: torch.Tensor, position_ids: torch.Tensor, first_layer: int,
                layers: Sequence[Callable] | None = None) -> torch.Tensor:  # fmt: skip
    """The final-norm hidden states of decoder `dec`'s layers `first_layer`.. on `hidden`, their input (B, T, H).
    Causal attention with no padding mask: each row's tokens must start at column 0 (padding only on the right).
    `layers` stands in for those layers (e.g. compiled: train.compile)."""
    hidden = run_layers(dec, hidden, position_ids, layers or dec.layers[first_layer : dec.config.num_hidden_layers])
    return dec.norm(hidden)


def below_forward(dec, input_ids: torch.Tensor, position_ids: torch.Tensor, first_layer: int) -> torch.Tensor:
    """The input of layer `first_layer`: the embeddings through the layers below it, with the same contract."""
    return run_layers(dec, dec.embed_tokens(input_ids), position_ids, dec.layers[:first_layer])


def run_layers(dec, hidden: torch.Tensor, position_ids: torch.Tensor, layers: Sequence[Callable]) -> torch.Tensor:
    types = set(getattr(dec.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise NotImplementedError(f"top_forward supports full-attention decoders only, not {sorted(types)}")
    position_embeddings = dec.rotary_emb(hidden, position_ids=position_ids)
    for layer in layers:
        hidden = layer(hidden, attention_mask=None, position_embeddings=position_embeddings, position_ids=position_ids)
    return hidden
