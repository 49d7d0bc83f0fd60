#!/usr/bin/env bash
# Source on a GPU host that has torch/transformers/triton but not agentrl's other deps (the
# device tool's H200): installs agentrl (no deps) and, from .gpuwheels/ (carry it; made with
# `pip download --no-deps`) or the folder $GPU_WHEELS (e.g. a bundle's whl/), only the wheels
# whose module does not import already, into /tmp/site, and puts that on PYTHONPATH.
# Idempotent.
R=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
W=${GPU_WHEELS:-$R/.gpuwheels}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/ind}
mkdir -p /tmp/site
if ls "$W"/*.whl >/dev/null 2>&1; then
  missing=$(python3 - "$W"/*.whl <<'PY'
import importlib.util, re, sys, zipfile
here = f"cp{sys.version_info.major}{sys.version_info.minor}"
for whl in sys.argv[1:]:
    py = whl.rsplit("-", 3)[1]
    if py.startswith("cp") and py != here:  # a binary wheel for another Python
        continue
    with zipfile.ZipFile(whl) as z:
        tops = {n.split("/")[0] for n in z.namelist() if not n.split("/")[0].endswith((".dist-info", ".data"))}
    mods = {m for t in tops if (m := re.sub(r"\.py$", "", t)).isidentifier()}
    if mods and not all(importlib.util.find_spec(m) for m in mods):
        print(whl)
PY
)
  # shellcheck disable=SC2086
  [ -z "$missing" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $missing 2>&1 | tail -3
fi
# GPU_ENV_KEEP_AGENTRL=1: an agentrl already in /tmp/site stays (processes may be running it).
if [ -z "${GPU_ENV_KEEP_AGENTRL:-}" ] || [ ! -d /tmp/site/agentrl ]; then
  python3 -m pip install -q --upgrade --no-index --find-links "$W" --no-deps --no-compile \
    --target /tmp/site "$R" 2>&1 | tail -3
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if ! (cd /tmp && python3 -c "import agentrl.trainer, agentrl.envs"); then
  # Seen in session 24: a call that carried no .gpuwheels had no setuptools to build agentrl.
  ls "$W"/*.whl >/dev/null 2>&1 || echo "gpu_env: no wheels in $W: carry .gpuwheels" >&2
  return 1 2>/dev/null || exit 1
fi
