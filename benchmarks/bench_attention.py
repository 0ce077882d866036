"""One decode step's attention at SmolLM2-135M's shapes (9 query heads over 3 key/value heads, head dim 64), with
a per-row length mask as the rollout engine gives it: PyTorch SDPA with `enable_gqa` against
`components.model.attention.grouped_decode`, two matmuls over the grouped heads (each key/value head read once, for
its 3 query heads), side by side in one process. Also prints the largest difference between the two outputs.

    python benchmarks/bench_attention.py [--rows 64] [--columns 250 700] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from components.evaluation.machine import cpu_line

from components.model.attention import grouped_decode

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def sdpa_gqa(q, k, v, mask):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def grouped_matmul(q, k, v, mask):
    """What sdpa_gqa runs for a decode step now, in SDPA's output layout [B, H, 1, D]."""
    return grouped_decode(q, k, v, mask, None).transpose(1, 2)


def ms_per_call(fn, *args, repeats: int) -> float:
    for _ in range(3):
        fn(*args)
    start = time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--columns", type=int, nargs="+", default=[250, 700])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    print(f"{cpu_line()}; torch {torch.__version__}; {args.threads} threads; {args.rows} rows")
    print("| dtype | columns | sdpa_gqa ms / layer | grouped matmul ms / layer | ratio | max abs diff |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        for t in args.columns:
            q = torch.randn(args.rows, HEADS, 1, HEAD_DIM, generator=g).to(dtype)
            k, v = (torch.randn(args.rows, KV_HEADS, t, HEAD_DIM, generator=g).to(dtype) for _ in range(2))
            lengths = torch.randint(t // 2, t + 1, (args.rows,), generator=g)
            mask = (torch.arange(t)[None, :] < lengths[:, None])[:, None, None, :]
            diff = (sdpa_gqa(q, k, v, mask).float() - grouped_matmul(q, k, v, mask).float()).abs().max().item()
            a = ms_per_call(sdpa_gqa, q, k, v, mask, repeats=args.repeats)
            b = ms_per_call(grouped_matmul, q, k, v, mask, repeats=args.repeats)
            print(f"| {str(dtype).removeprefix('torch.')} | {t} | {a:.2f} | {b:.2f} | {a / b:.1f}x | {diff:.2g} |")


if __name__ == "__main__":
    main()
