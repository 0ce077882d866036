"""The local train backend: the loop (train.py), the RL update (update.py), advantages, losses, critic, batches and
exact-resume checkpoints."""
