"""Batched multi-turn generation: the chat format, the episode set-up, trajectories with the action mask."""
