"""Recipe tests import their helper env module (`parity_env`) from this directory."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
