"""Probe: forward and backward of the log-prob loss through losses.token_logprobs, with and without the entropy.

    python benchmarks/bench_entropy.py

Random fp32 logits at SmolLM2-135M's (49,152) and Qwen2.5's (151,936) vocabulary sizes; the best of three rounds.
"""

import time

import torch

from components.train.local.losses import token_logprobs

torch.set_num_threads(2)
for n, v in [(1000, 49152), (500, 151936)]:
    x, labels = torch.randn(n, v), torch.randint(0, v, (n,))
    best = {}
    for _ in range(3):
        for entropy in (True, False):
            logits = x.clone().requires_grad_(True)
            t0 = time.perf_counter()
            token_logprobs(logits, labels, entropy)[0].sum().backward()
            best[entropy] = min(best.get(entropy, float("inf")), time.perf_counter() - t0)
    print(f"{n} tokens x {v}: with the entropy {best[True] * 1e3:.1f} ms, without {best[False] * 1e3:.1f} ms")
