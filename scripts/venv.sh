#!/usr/bin/env bash
# A venv with an up-to-date pip: scripts/venv.sh VENV PYTHON. Should venv's ensurepip step fail (it hides its own
# error), the venv is made again without it and pip is installed into it by PYTHON's own pip.
set -euo pipefail
venv=$1 python=$2
if ! "$python" -m venv "$venv"; then
  echo "$venv: '$python -m venv' failed in ensurepip; making it again with --without-pip and $python's pip" >&2
  rm -rf "$venv"
  "$python" -m venv --without-pip "$venv"
  "$python" -m pip --python "$venv/bin/python" install -q pip
fi
"$venv/bin/python" -m pip install -q --upgrade pip
