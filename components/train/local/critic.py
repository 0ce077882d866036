"""PPO critic: the policy's transformer trunk (a separate copy) with a scalar value head."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel

from components.train.local.batch import Batch
from components.train.local.losses import response_hidden


class Critic(nn.Module):
    def __init__(self, trunk: nn.Module, hidden_size: int):
        super().__init__()
        self.trunk = trunk
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @property
    def base_model(self) -> nn.Module:
        return self.trunk

    @classmethod
    def from_pretrained(cls, path: str, dtype=torch.float32) -> Critic:
        trunk = AutoModel.from_pretrained(path, dtype=dtype)
        return cls(trunk, trunk.config.hidden_size)

    def values(self, batch: Batch) -> torch.Tensor:
        """V(s_t) for the state before each response token: (B, R)."""
        return self.value_head(response_hidden(self, batch)).squeeze(-1).float()
