#!/usr/bin/env bash
# The harness venv: the main environment's packages (--system-site-packages) plus the agent
# harnesses of scripts/harness-requirements.txt, whose pins clash with the main environment,
# and the npm CLIs of scripts/harness-npm.txt under .npm-harness. Usage: setup-harness.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-harness}
if [ ! -x "$venv/bin/python" ]; then
  python -m venv --system-site-packages "$venv"
  # venv seeds an old setuptools (65 on 3.11) that shadows the main env's and cannot read
  # pyproject's SPDX `license` string; the editable install below builds with the main env's.
  "$venv/bin/pip" uninstall -y -q setuptools
fi
reqs=$(grep -v -E '^\s*(#|$)' scripts/harness-requirements.txt || true)
if [ -n "$reqs" ]; then
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $reqs
fi
"$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
npms=$(grep -v -E '^\s*(#|$)' scripts/harness-npm.txt || true)
if [ -n "$npms" ]; then
  # shellcheck disable=SC2086
  npm install --silent --no-audit --no-fund --prefix .npm-harness $npms
fi
echo "harness venv ready: $venv"
