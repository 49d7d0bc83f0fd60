"""One-off diagnostics: each script answered one question (README.md says which). The async
sweep (`benchmarks/_gpu_grpo_async.py`) imports its optional probes from here as `diagnostics`."""
