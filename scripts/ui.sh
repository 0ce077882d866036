#!/usr/bin/env bash
# The MLflow UI on the project's store, light: one server process with one worker and no job runner (the UI needs
# none; the runner alone starts several consumers). Prints the URL of the runs table in its headline view: a row per
# pipeline run with its EM per set and system and the champion version (components/tracking/runs.py).
#   scripts/ui.sh [PORT] [BACKEND_STORE_URI] [EXPERIMENT]   (defaults: 5000, the project's mlflow.db, agentr1)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${1:-5000}"
STORE="${2:-sqlite:///$REPO/mlflow.db}"
EXPERIMENT="${3:-agentr1}"
MLFLOW="$REPO/.venv/bin/mlflow"
[[ -x "$MLFLOW" ]] || { echo "scripts/ui.sh: $MLFLOW not found: run \`make run\` first" >&2; exit 1; }

url="http://127.0.0.1:$PORT"
if [[ "$STORE" == sqlite:///* ]]; then  # the experiment's id and its headline view, read without starting MLflow
  exp=$("$REPO/.venv/bin/python" - "${STORE#sqlite:///}" "$EXPERIMENT" <<'PY' 2>/dev/null || true
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
row = db.execute("SELECT experiment_id FROM experiments WHERE name = ?", (sys.argv[2],)).fetchone()
view = row and db.execute("SELECT 1 FROM experiment_tags WHERE experiment_id = ? AND key = ?",
                          (row[0], "mlflow.sharedViewState.agentr1-headline")).fetchone()
print(f"{row[0]}/runs?viewStateShareKey=agentr1-headline" if view else f"{row[0]}/runs" if row else "")
PY
)
  [[ -n "$exp" ]] && url="$url/#/experiments/$exp"
fi
echo "MLflow UI: $url"
echo "  (store $STORE; Ctrl-C stops it)"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::DeprecationWarning}"
exec "$MLFLOW" server --backend-store-uri "$STORE" --host 127.0.0.1 --port "$PORT" --workers 1
