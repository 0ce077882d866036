"""How any stage loads a model (an HF directory; where each lives: components/artifacts.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from components.config import Config

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(cfg: Config) -> torch.device:
    if cfg.model.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.model.device)


def load_model(path: str | Path, cfg: Config, device: torch.device | None = None):
    """(model, tokenizer) from a model dir or hub id; the model in train mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = str(path)
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[cfg.model.dtype])
    except OSError as err:
        raise FileNotFoundError(f"{name}: cannot load model/tokenizer ({err}); run the base_model stage") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.to(device or pick_device(cfg)), tok


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 in hardware; elsewhere bf16 matmuls are emulated, far slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    caps = torch.cpu.get_capabilities()
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))


def uses_autocast(cfg: Config, device: torch.device) -> bool:
    return native_bf16(device) if cfg.model.autocast == "auto" else cfg.model.autocast


def autocast(cfg: Config, device: torch.device) -> AbstractContextManager:
    """bf16 autocast around forward passes when `model.autocast` is on ("auto": where bf16 is native)."""
    if not uses_autocast(cfg, device):
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def freeze_below(model, trainable_layers: int | None) -> list[torch.nn.Parameter]:
    """Train only the top `trainable_layers` decoder layers and the final norm; returns the trainable parameters."""
    if trainable_layers is not None:
        decoder = model.get_decoder()
        model.requires_grad_(False)
        for layer in decoder.layers[-trainable_layers:]:
            layer.requires_grad_(True)
        decoder.norm.requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]
