"""Process-wide defaults (components/env.py) that change results, checked in a fresh interpreter."""

import os
import subprocess
import sys

# The same F.linear on copies of its operands at every float offset: equal to the last bit only if MKL's
# result does not depend on alignment. Without MKL_CBWR, 12 of these 210 products differed on an AVX2 EPYC.
ALIGNED = """
import sys
from components.env import apply_defaults
apply_defaults(sys.argv[1])
import torch, torch.nn.functional as F
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
differ = 0
SHAPES = [(256, 128, 128), (33, 128, 384), (256, 128, 2048), (7, 128, 128), (1, 128, 2048), (256, 128, 512), (256, 512, 128)]
for n, k, m in SHAPES:
    x, w, b = torch.randn(n, k, generator=g), torch.randn(m, k, generator=g), torch.randn(m, generator=g)
    ref = F.linear(x, w, b)
    for off in range(1, 16):
        xs, ws = torch.empty(n * k + 16), torch.empty(m * k + 16)
        xs[off:off + n * k], ws[off:off + m * k] = x.flatten(), w.flatten()
        differ += not torch.equal(F.linear(xs[off:off + n * k].view(n, k), w, b), ref)
        differ += not torch.equal(F.linear(x, ws[off:off + m * k].view(m, k), b), ref)
print(differ)
"""


def test_a_matmul_gives_the_same_bits_wherever_its_operands_lie(tmp_path, repo_root):
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}  # as a user's shell has it
    out = subprocess.run([sys.executable, "-c", ALIGNED, str(tmp_path)], cwd=repo_root, env=env, capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "0", out.stdout + out.stderr
