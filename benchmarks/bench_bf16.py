"""fp32 against bf16 matmuls at SmolLM2-135M's shapes on this CPU, and what `model.autocast: auto` picks here.

    python benchmarks/bench_bf16.py --threads 1
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from components.model.loading import native_bf16

SHAPES = {"attention proj": (1024, 576, 576), "mlp up": (1024, 576, 1536), "mlp down": (1024, 1536, 576)}


def gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    caps = torch.cpu.get_capabilities()
    print(f"{caps.get('cpu_name') or platform.processor()}, {args.threads} thread(s), torch {torch.__version__}, "
          f"avx512_bf16={caps.get('avx512_bf16')} amx_bf16={caps.get('amx_bf16')}: autocast auto -> "
          f"{'bf16' if native_bf16(torch.device('cpu')) else 'fp32'}")  # fmt: skip
    print(f"{'matmul (m x k x n)':<32} {'fp32 GFLOPS':>11} {'bf16 GFLOPS':>11} {'bf16/fp32':>9}")
    for name, shape in SHAPES.items():
        f32, bf16 = (gflops(*shape, dtype, args.repeats) for dtype in (torch.float32, torch.bfloat16))
        print(f"{name + ' ' + 'x'.join(map(str, shape)):<32} {f32:11.1f} {bf16:11.1f} {bf16 / f32:9.3f}")


if __name__ == "__main__":
    main()
