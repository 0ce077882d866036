"""vLLM in bf16 and in fp32 on this machine, side by side in one run, beside a plain transformers decode loop.

Where the CPU has no native bf16 (AVX2 only), torch emulates bf16 matmuls, and `rollout.vllm.dtype: auto` has the
worker compute in fp32. Same model, same random prompts, greedy, through the project's vLLM worker (`VllmEngine`):
generated tokens/s with each prompt's prefill included, the second of two rounds (the first packs weights).
The reference: bench_real_rollout.py's plain greedy `DynamicCache` loop in fp32 after the same prompt length, decode
only.

    python benchmarks/bench_vllm_dtype.py --model artifacts/models/base --batch 16 --prompt 200 --new 128

`--model`: a model directory vLLM loads, e.g. the real profile's base (`agentr1 base-model -S profile=real`).
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
from bench_real_rollout import plain_decode  # the plain loop the rollout benchmark compares against
from transformers import AutoModelForCausalLM

from components.config import RolloutConfig
from components.evaluation.machine import cpu_line
from components.model.loading import native_bf16
from components.rollout.vllm_engine import VllmEngine
from components.tracking.runs import commit as git_commit


def vllm_tok_s(model: str, dtype: str, prompts: list[list[int]], new: int, threads: int) -> tuple[float, float]:
    """(start-up s, generated tok/s of the second round) for one worker computing in `dtype`."""
    t0 = time.perf_counter()
    rc = RolloutConfig(vllm={"dtype": dtype, "threads": threads})
    with VllmEngine(model, rc, max_model_len=len(prompts[0]) + new + 8) as engine:
        start = time.perf_counter() - t0
        for _ in range(2):
            engine.reset(0)
            engine.add([{"id": str(i), "prompt": p, "max_tokens": new, "temperature": 0.0, "stop": []}
                        for i, p in enumerate(prompts)])  # fmt: skip
            t, done, tokens = time.perf_counter(), 0, 0
            while done < len(prompts):
                for _, ids, _ in engine.step():
                    done, tokens = done + 1, tokens + len(ids)
            rate = tokens / (time.perf_counter() - t)
    return start, rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(100, 40000, (args.batch, args.prompt), generator=gen).tolist()
    print(f"{cpu_line()}, {args.threads} threads; native bf16: {native_bf16(torch.device('cpu'))}; "
          f"{datetime.date.today()}; commit {git_commit()}")
    print(f"{args.batch} prompts of {args.prompt} random tokens, {args.new} new tokens each, greedy\n")
    print("| engine | dtype | start-up s | generated tok/s |\n|---|---|---|---|")
    for dtype in ("bfloat16", "float32"):
        start, rate = vllm_tok_s(args.model, dtype, prompts, args.new, args.threads)
        print(f"| vLLM, prefill included | {dtype} | {start:.1f} | {rate:.1f} |", flush=True)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with torch.no_grad():
        plain = plain_decode(model, args.batch, args.prompt, args.new)
    print(f"| plain loop, decode only | float32 | | {plain:.1f} |")


if __name__ == "__main__":
    main()
