"""The train stage (stage.py) beside its two backends: local/ (the PyTorch trainer) and verl/ (verl on Ray + vLLM).

This file imports nothing: a backend's import runs it, and a backend must not load the stage above it."""
