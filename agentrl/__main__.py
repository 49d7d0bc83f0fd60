"""`python -m agentrl ...`: the same command line as the `agentrl` script.

Why: in an environment where the console script is not on PATH (a venv not activated, a
mixed install), `python -m agentrl` is the documented fallback and must reach the CLI.
"""

import sys

from agentrl.cli import main

sys.exit(main())
