"""bf16 autocast: `model.autocast: auto` turns it on only where the device computes bf16 natively."""

from __future__ import annotations

import pytest
import torch

from components.config import load_config
from components.model.loading import autocast, native_bf16, uses_autocast

CPU = torch.device("cpu")
NO_BF16 = {"avx2": True, "avx512_bf16": False, "amx_bf16": False}


@pytest.mark.parametrize("caps,native", [(NO_BF16, False), ({**NO_BF16, "avx512_bf16": True}, True),
                                         ({**NO_BF16, "amx_bf16": True}, True)])  # fmt: skip
def test_auto_follows_the_cpu_bf16_instructions(repo_root, monkeypatch, caps, native):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)  # the hardware, injected: this CPU has one kind
    cfg = lambda value: load_config(repo_root / "params.yaml", {"model.autocast": value})  # noqa: E731
    assert native_bf16(CPU) is native
    assert uses_autocast(cfg("auto"), CPU) is native
    assert uses_autocast(cfg(True), CPU) is True and uses_autocast(cfg(False), CPU) is False  # explicit wins
    with autocast(cfg("auto"), CPU):
        assert torch.is_autocast_enabled("cpu") is native


def test_the_real_profile_asks_for_auto(repo_root):
    assert load_config(repo_root / "params.yaml", {"profile": "real"}).model.autocast == "auto"

