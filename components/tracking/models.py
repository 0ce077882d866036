"""Hugging Face model directories as MLflow models."""

from __future__ import annotations

import logging
from pathlib import Path

PIP_REQUIREMENTS = ["torch==2.13.0", "transformers==5.10.4", "tokenizers==0.22.2"]


def log_hf_model(hf_dir: Path, name: str) -> str:
    """Log a save_pretrained directory (model + tokenizer) into the active run; return the model URI."""
    import mlflow

    if not (hf_dir / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir}: not a Hugging Face model directory (no config.json)")
    logging.getLogger("mlflow.transformers").setLevel(logging.ERROR)  # no hub: model-card warnings are noise
    info = mlflow.transformers.log_model(
        transformers_model=str(hf_dir),
        name=name,
        task="text-generation",
        pip_requirements=PIP_REQUIREMENTS,
    )
    return info.model_uri
