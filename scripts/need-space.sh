#!/usr/bin/env bash
# Stop before an install that the disk cannot hold: scripts/need-space.sh GB DIR WHAT. pip on a full disk stops
# half-way with "[Errno 28] No space left on device" and a long traceback; this names what needs the space and where.
set -euo pipefail
gb=$1 dir=$2 what=$3
for d in "$dir" "${TMPDIR:-/tmp}"; do  # pip unpacks its wheels in the temp dir
  while [[ ! -e $d ]]; do d=$(dirname "$d"); done  # DIR may not exist yet: its nearest existing parent
  read -r free_kb mount < <(df -Pk "$d" | awk 'NR == 2 {print $4, $6}')
  if (( free_kb < gb * 1024 * 1024 )); then
    free=$(awk -v k="$free_kb" 'BEGIN {printf "%.1f", k / 1048576}')
    echo "$what needs about $gb GB free on $mount ($d); $free GB is free" >&2
    exit 1
  fi
done
