"""`python -m agentrl ...`: the same command line as the `agentrl` script.

Why: in an environment where the console script is not on PATH (a venv not activated, a
mixed install), `python -m agentrl` is the documented fallback and must reach the CLI.
The guard: a process started with multiprocessing's "spawn" (vLLM's engine core on a GPU,
`vllm_platform.start_method`) imports this module again as ``__mp_main__``, where running
the CLI a second time would start a second run.
"""

import sys

from agentrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
