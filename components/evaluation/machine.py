"""The CPU line every benchmark figure carries: model name, the SIMD flags that decide bf16 speed, core count; and
the GPU, where one ran."""

from __future__ import annotations

import os
import platform
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_line() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lines = info.splitlines()
    name = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())
    flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
    return f"{name} ({', '.join(f for f in FLAGS if f in flags) or 'no AVX'}), {os.cpu_count()} CPUs"


def gpu_line() -> str:
    """The CUDA device and torch version, to append to the CPU line; empty where CUDA is not available."""
    import torch

    return f"; GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}" if torch.cuda.is_available() else ""
