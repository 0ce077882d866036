#!/usr/bin/env bash
# GPU check: a few GRPO steps of the CPU profile's tiny model through verl + vLLM on one CUDA GPU, no network.
#
#   scripts/gpu_check.sh [OUT_DIR]          (default OUT_DIR: $OUT, else artifacts/gpu_check)
#
# Needs torch with CUDA, vllm and verl importable by $PYTHON (default .venv/bin/python, else python3). When they
# are missing and WHEELS names a directory of carried wheels, they are installed from it with --no-index; nothing
# is downloaded. Runs the real pipeline stages (prepare, index, base_model, train --backend verl) with small params
# and writes to OUT_DIR: metrics.json (the train stage's metrics), curve.csv (verl's per-step scores), train.log
# (verl's output), env.txt (GPU and package versions), and the launch command in command.txt.
#
# Env: STEPS (3), GROUP (4), QUESTIONS (8), PYTHON, WHEELS.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=$(realpath -m "${1:-${OUT:-artifacts/gpu_check}}")
STEPS=${STEPS:-3}
GROUP=${GROUP:-4}
QUESTIONS=${QUESTIONS:-8}
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mkdir -p "$OUT"

export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0
export MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$OUT/mlflow.db}

have() { "$PYTHON" -c "import torch, vllm, verl, components; assert torch.cuda.is_available()" 2>/dev/null; }
if ! have; then
  if [ -n "${WHEELS:-}" ]; then
    "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" vllm -e '.[verl]'
  fi
  have || { echo "gpu_check: need CUDA torch, vllm, verl and this project importable by $PYTHON (or WHEELS=dir)" >&2; exit 2; }
fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" -c "import torch, vllm, verl, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('vllm', vllm.__version__, 'verl', verl.__version__, 'transformers', transformers.__version__)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

# Small, GPU-friendly params: head_dim 64 (vLLM attention kernels), prompt + response within the model's context.
SETS=(
  -S data.synthetic.n_train=256 -S data.synthetic.n_dev=32 -S data.synthetic.n_test=32
  -S model.tiny.hidden_size=256 -S model.tiny.num_attention_heads=4 -S model.tiny.num_key_value_heads=2
  -S model.tiny.intermediate_size=512 -S model.tiny.max_position_embeddings=2048
  -S train.backend=verl -S train.algorithm=grpo -S train.steps="$STEPS"
  -S train.questions_per_step="$QUESTIONS" -S train.group_size="$GROUP"
  -S train.verl.prompt_length=512 -S train.verl.response_length=768 -S train.verl.gpu_memory_utilization=0.4
  -S train.verl.micro_batch_size_per_gpu=8 -S train.verl.agent_workers=2 -S train.verl.eval_questions=32
  -S train.verl.save_freq="$STEPS" -S train.verl.test_freq="$STEPS"
)
AGENTR1=("$PYTHON" -m components.cli)

"${AGENTR1[@]}" prepare "${SETS[@]}"
"${AGENTR1[@]}" index "${SETS[@]}"
"${AGENTR1[@]}" base-model "${SETS[@]}"
"${AGENTR1[@]}" train --dry-run "${SETS[@]}" | sed -n '/^# launch command/{n;p;q}' > "$OUT/command.txt"
status=0
"${AGENTR1[@]}" train "${SETS[@]}" || status=$?

cp artifacts/verl/train.log "$OUT/train.log" 2>/dev/null || true
cp artifacts/train/curve.csv "$OUT/curve.csv" 2>/dev/null || true
"$PYTHON" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
import mlflow

out = Path(sys.argv[1])
client = mlflow.MlflowClient()
runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
train = [r for r in runs if r.data.tags.get("agentr1.stage") == "train"]
verl = [r for r in runs if r.data.tags.get("agentr1.backend") == "verl"]
report = {
    "train_stage": train[0].data.metrics if train else None,
    "verl_run": verl[0].data.metrics if verl else None,
    "model": json.loads(Path("artifacts/train/model.json").read_text()) if Path("artifacts/train/model.json").exists() else None,
}
(out / "metrics.json").write_text(json.dumps(report, indent=2, sort_keys=True))
print(json.dumps(report, indent=2, sort_keys=True))
EOF
exit $status
