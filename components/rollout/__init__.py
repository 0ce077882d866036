"""Batched multi-turn generation: the chat format, trajectories with the action mask, agent evaluation."""
