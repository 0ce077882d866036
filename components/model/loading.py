"""How any stage loads a model (an HF directory; where each lives: components/artifacts.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from components.config import Config
from components.rollout.vllm_engine import VllmEngine

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(cfg: Config) -> torch.device:
    if cfg.model.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.model.device)


def load_model(path: str | Path, cfg: Config, device: torch.device | None = None):
    """(model, tokenizer) from a model dir or hub id; the model in train mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from components.model.attention import attention_for

    name = str(path)
    device = device or pick_device(cfg)
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[cfg.model.dtype],
                                                     attn_implementation=attention_for(cfg.model.attention, device))  # fmt: skip
    except OSError as err:
        raise FileNotFoundError(f"{name}: cannot load model/tokenizer ({err}); run the base_model stage") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.to(device), tok


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


def rollout_dtype(cfg: Config, device: torch.device) -> torch.dtype | None:
    """The dtype of the rollout's own copy of the weights, or None to roll out on the policy itself.

    "auto" copies to bf16 where the policy already computes in bf16 (autocast on, bf16 native): autocast recasts
    every frozen weight in every forward, which at one token per row cost more than the matmuls."""
    setting = cfg.rollout.dtype
    if setting == "auto":
        return torch.bfloat16 if uses_autocast(cfg, device) else None
    wanted = DTYPES[setting]
    return None if wanted == DTYPES[cfg.model.dtype] else wanted


class RolloutWeights:
    """The weights the rollout runs on: the policy itself, a copy in `rollout_dtype` kept in step with it, or (with
    `rollout.engine: vllm`) a vLLM process started on `model_dir` and sent the policy's weights at each sync."""

    def __init__(self, policy, cfg: Config, model_dir: str | Path | None = None):
        import copy

        self.policy = policy
        self.sent_all = False  # a vLLM process gets every weight once (a resumed policy differs from model_dir)
        self.synced: tuple[int, ...] | None = None  # the trainable weights' versions at the last sync
        if cfg.rollout.engine == "vllm":
            if model_dir is None:
                raise ValueError("rollout.engine: vllm needs the model directory the vLLM process starts from")
            self.model = VllmEngine(model_dir, cfg.rollout, seed=cfg.project.seed)
            return
        device = next(policy.parameters()).device
        dtype = rollout_dtype(cfg, device)
        self.model = policy if dtype is None else copy.deepcopy(policy).to(dtype).eval().requires_grad_(False)

    def sync(self) -> None:
        """Bring the rollout's weights to the policy's: only the trainable ones change in an update."""
        if self.model is self.policy:
            return
        # torch bumps a tensor's _version at every in-place write (optimizer step, load_state_dict): unchanged
        # versions mean the rollout already has these weights, e.g. an evaluation right before the next step.
        versions = tuple(p._version for p in self.policy.parameters() if p.requires_grad)
        if self.sent_all and versions == self.synced:
            return
        changed = [(n, p) for n, p in self.policy.named_parameters() if p.requires_grad or not self.sent_all]
        if isinstance(self.model, VllmEngine):
            self.model.load_weights(changed)
        else:
            mine = dict(self.model.named_parameters())
            with torch.no_grad():
                for name, p in changed:
                    mine[name].copy_(p)
        self.sent_all, self.synced = True, versions

    def close(self) -> None:
        if isinstance(self.model, VllmEngine):
            self.model.close()


def load_generator(path: str | Path, cfg: Config, device: torch.device | None = None):
    """(what the rollout runs on, tokenizer): the model (`load_model`), or a vLLM process on the directory
    (`rollout.engine: vllm`; close it when done)."""
    if cfg.rollout.engine != "vllm":
        return load_model(path, cfg, device)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except OSError as err:
        raise FileNotFoundError(f"{path}: cannot load tokenizer ({err}); run the base_model stage") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return VllmEngine(path, cfg.rollout, seed=cfg.project.seed), tok


def rollout_autocast(cfg: Config, model) -> AbstractContextManager:
    """`autocast` around a rollout on a transformers model; vLLM chooses its own precision."""
    return nullcontext() if isinstance(model, VllmEngine) else autocast(cfg, model.device)
