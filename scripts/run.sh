#!/usr/bin/env bash
# `make run`: the pipeline, then its summary. With overrides it is a DVC experiment, `dvc exp run -S ...`, which
# writes them into params.yaml in DVC's own YAML layout; the file gets its own bytes back when the run ends (also
# when it fails or is interrupted), so the checkout stays clean. The experiment keeps its params (`dvc exp show`).
#   scripts/run.sh [-S key=value ...]   (dvc and agentr1 from PATH; run in the project root)
set -euo pipefail

if (( $# == 0 )); then
  dvc repro
else
  saved="$(mktemp)"
  cp -p params.yaml "$saved"
  restore() { cp -p "$saved" params.yaml && rm -f "$saved"; }
  trap restore EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  dvc exp run "$@"
  restore
  trap - EXIT
fi
echo
agentr1 summary "$@"
