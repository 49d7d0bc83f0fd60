#!/usr/bin/env bash
# The harness venv: the main environment's packages (--system-site-packages) plus the agent
# harnesses of scripts/harness-requirements.txt, whose pins clash with the main environment,
# and the npm CLIs of scripts/harness-npm.txt under .npm-harness. Usage: setup-harness.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-harness}
# --without-pip: the venv's own bundled pip/setuptools (65 on Python 3.11) would shadow the main
# environment's and cannot build this project's metadata (a PEP 639 license string)
[ -x "$venv/bin/python" ] || python -m venv --system-site-packages --without-pip "$venv"
reqs=$(grep -v -E '^\s*(#|$)' scripts/harness-requirements.txt || true)
if [ -n "$reqs" ]; then
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q $reqs
fi
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
npms=$(grep -v -E '^\s*(#|$)' scripts/harness-npm.txt || true)
if [ -n "$npms" ]; then
  # shellcheck disable=SC2086
  npm install --silent --no-audit --no-fund --prefix .npm-harness $npms
fi
echo "harness venv ready: $venv"
