"""The base_model stage: model sources and parts, the tiny model's format priming, the format warm-up and the cold
start of a real model."""
