"""Does `torch.compile` of the decode step pay on this CPU? Greedy decode of a Hugging Face model after a random
prompt, side by side in one process at the same batch and dtype:
- eager with transformers' `StaticCache` (fixed shapes: what a compiled graph needs);
- the same forward under `torch.compile(dynamic=False)` (its compile time is printed apart);
- the plain loop over `DynamicCache` (the reference of `bench_real_rollout.py`).

    python benchmarks/bench_compile.py --model .cache/models/gguf-<sha>-c<converter> --batch 64 --dtypes fp32 bf16
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from machine import cpu_line  # benchmarks/machine.py
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def decode(model, fwd, ids: torch.Tensor, steps: int, cache) -> tuple[float, float]:
    """(seconds of the first decode step, tokens/s of the steps after the first 4)."""
    b, p = ids.shape
    static = isinstance(cache, StaticCache)
    pos = (lambda i: {"cache_position": torch.arange(p) if i is None else torch.tensor([p + i])}) if static else (lambda i: {})
    with torch.no_grad():
        tok = model(input_ids=ids, past_key_values=cache, use_cache=True, **pos(None)).logits[:, -1:].argmax(-1)
        times = []
        for i in range(steps):
            t0 = time.perf_counter()
            tok = fwd(input_ids=tok, past_key_values=cache, use_cache=True, **pos(i)).logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t0)
    return times[0], b * (steps - 4) / sum(times[4:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="a Hugging Face model directory")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ids = torch.randint(100, 1000, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0))
    print(f"# bench_compile: {args.model.name}, batch {args.batch}, prompt {args.prompt}, {args.steps} decode steps, "
          f"{args.threads} threads, torch {torch.__version__}, {cpu_line()}, load average {os.getloadavg()[0]:.1f} at start\n")
    print("| dtype | eager StaticCache tok/s | compiled StaticCache tok/s | compile + first step s | plain DynamicCache tok/s |")
    print("|---|---|---|---|---|")
    for name in args.dtypes:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[name]).eval()
        static = lambda: StaticCache(config=model.config, max_cache_len=args.prompt + args.steps + 8)  # noqa: E731
        _, eager = decode(model, model, ids, args.steps, static())
        first, compiled = decode(model, torch.compile(model, dynamic=False), ids, args.steps, static())
        _, plain = decode(model, model, ids, args.steps, DynamicCache())
        print(f"| {name} | {eager:.0f} | {compiled:.0f} | {first:.1f} | {plain:.0f} |", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
