"""The local RL trainer: advantages, losses, critic, batches and exact-resume checkpoints."""
