#!/usr/bin/env bash
# The champion over HTTP on 127.0.0.1: `mlflow models serve` from the project's own environment, one worker. The model
# stays loaded, so `agentr1 ask --url URL "..."` answers without importing torch or loading weights.
#   scripts/serve.sh [PORT] [TRACKING_URI] [MODEL_URI]   (defaults: 5001, the project's mlflow.db, the champion)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${1:-5001}"
export MLFLOW_TRACKING_URI="${2:-${MLFLOW_TRACKING_URI:-sqlite:///$REPO/mlflow.db}}"
MODEL="${3:-models:/agentr1-search-agent@champion}"
MLFLOW="$REPO/.venv/bin/mlflow"
[[ -x "$MLFLOW" ]] || { echo "scripts/serve.sh: $MLFLOW not found: run \`make run\` first" >&2; exit 1; }

echo "Serving $MODEL at http://127.0.0.1:$PORT  (Ctrl-C stops it)"
echo "  ask it: agentr1 ask --url http://127.0.0.1:$PORT \"Who is the neighbor of the rival of Goretu?\""
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false TQDM_DISABLE=1
export PATH="$REPO/.venv/bin:$PATH" PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::DeprecationWarning}"
exec "$MLFLOW" models serve -m "$MODEL" --env-manager local --host 127.0.0.1 -p "$PORT" -w 1
