"""Trajectories -> padded tensors in verl's layout: prompts left-padded, responses right-padded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from components.rollout.trajectory import Trajectory


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, P+R)
    attention_mask: torch.Tensor  # (B, P+R)
    position_ids: torch.Tensor  # (B, P+R)
    action_mask: torch.Tensor  # (B, R) 1 on model-generated tokens (the Agent-R1 action mask)
    response_mask: torch.Tensor  # (B, R) 1 on every real response token, env-inserted ones included
    token_rewards: torch.Tensor  # (B, R) process rewards on call-closing tokens, outcome on the last action
    index: np.ndarray  # (B,) question id: the group of each rollout
    right: torch.Tensor  # (B,) 1 where the episode's answer is right (EM), else 0
    prompt_width: int  # P
    hidden: torch.Tensor | None = None  # (B, P+R, H): the input of decoder layer `hidden_layer`, kept by the rollout
    hidden_layer: int = 0

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width :]

    @property
    def left_padding(self) -> torch.Tensor:
        """(B,) the pad columns in front of each row's prompt."""
        return self.prompt_width - self.attention_mask[:, : self.prompt_width].sum(-1)

    def to(self, device) -> Batch:
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in kw.items():
            if isinstance(v, torch.Tensor):
                kw[k] = v.to(device)
        return Batch(**kw)

    def select(self, rows: Sequence[int] | slice) -> Batch:
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in kw.items():
            if isinstance(v, torch.Tensor):
                kw[k] = v[rows]
            elif isinstance(v, np.ndarray):
                kw[k] = v[rows.cpu().numpy() if isinstance(rows, torch.Tensor) else rows]
        return Batch(**kw)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def trimmed(self, rows: Sequence[int] | slice) -> tuple[Batch, int]:
        """The rows with the all-padding columns cut off (left of the longest prompt, right of the longest
        response among them) and the kept response width r: an update on a micro-batch of short episodes
        then costs what they cost, not what the longest episode of the whole batch costs. Positions are kept."""
        b = self.select(rows)
        P = b.prompt_width
        r = max(1, int(b.response_mask.sum(-1).max()))
        lo = int(b.left_padding.min())
        kw = {f.name: getattr(b, f.name) for f in fields(b)}
        for k in ("input_ids", "attention_mask", "position_ids", "hidden"):
            if kw[k] is not None:
                kw[k] = kw[k][:, lo : P + r]
        for k in ("action_mask", "response_mask", "token_rewards"):
            kw[k] = kw[k][:, :r]
        kw["prompt_width"] = P - lo
        return Batch(**kw), r


def collate(trajs: Sequence[Trajectory], pad_id: int, hidden_layer: int | None = None,
            groups: Sequence[str] | None = None) -> Batch:  # fmt: skip
    """verl's layout of `trajs`. With `hidden_layer`, the batch also carries the trajectories' kept hidden states
    (`Trajectory.hidden`, the input of that decoder layer) so an update can start there. `groups` names each
    trajectory's group (default: its question's id)."""
    P = max(t.prompt_len for t in trajs)
    R = max(t.response_len for t in trajs)
    B = len(trajs)
    ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attn = torch.zeros(B, P + R, dtype=torch.long)
    action = torch.zeros(B, R, dtype=torch.float32)
    rewards = torch.zeros(B, R, dtype=torch.float32)
    for i, t in enumerate(trajs):
        p, r = t.prompt_len, t.response_len
        ids[i, P - p : P + r] = torch.tensor(t.input_ids, dtype=torch.long)
        attn[i, P - p : P + r] = 1
        action[i, :r] = torch.tensor(t.action_mask[p:], dtype=torch.float32)
        rewards[i, :r] = torch.tensor(t.rewards[p:], dtype=torch.float32)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    hidden = None
    if hidden_layer is not None:
        if any(t.hidden is None for t in trajs):
            raise ValueError(f"collate: hidden_layer={hidden_layer} but a trajectory kept no hidden states")
        hidden = trajs[0].hidden.new_zeros(B, P + R, trajs[0].hidden.shape[-1])
        for i, t in enumerate(trajs):
            hidden[i, P - t.prompt_len : P - t.prompt_len + len(t.hidden)] = t.hidden
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        position_ids=position_ids,
        action_mask=action,
        response_mask=attn[:, P:].float(),
        token_rewards=rewards,
        index=np.array(list(groups) if groups is not None else [t.episode.question.id for t in trajs], dtype=object),
        right=torch.tensor([t.episode.em for t in trajs], dtype=torch.float32),
        prompt_width=P,
        hidden=hidden,
        hidden_layer=hidden_layer or 0,
    )
