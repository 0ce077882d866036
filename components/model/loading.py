"""Where the base and trained models live, and how any stage loads them (tiny local model or a hub id)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from components.config import Config

RESOLVED = "resolved.json"  # in the base dir of a real model: which hub id / path it stands for
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def base_dir(cfg: Config) -> Path:
    return cfg.artifacts / "models" / "base"


def trained_dir(cfg: Config) -> Path:
    return cfg.artifacts / "models" / "trained"


def resolve(path: str | Path) -> str:
    """A model dir written by save_pretrained, or the hub id/path a `resolved.json` there points at."""
    p = Path(path)
    if (p / RESOLVED).is_file():
        return json.loads((p / RESOLVED).read_text(encoding="utf-8"))["name_or_path"]
    return str(p)


def pick_device(cfg: Config) -> torch.device:
    if cfg.model.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.model.device)


def load_model(path: str | Path, cfg: Config, device: torch.device | None = None):
    """(model, tokenizer) from a model dir or hub id; the model in train mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = resolve(path)
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[cfg.model.dtype])
    except OSError as err:
        raise FileNotFoundError(f"{name}: cannot load model/tokenizer ({err}); run the base_model stage") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.to(device or pick_device(cfg)), tok
