"""Loaded by test_collect_without_extras: makes the optional extras named in
AGENTRL_BLOCK_MODULES unimportable, as on a host without them (`import x` raises
ModuleNotFoundError and `importlib.util.find_spec("x")` is None, as for a missing package)."""

import os
import sys

for _name in filter(None, os.environ.get("AGENTRL_BLOCK_MODULES", "").split(",")):
    sys.modules[_name] = None  # type: ignore[assignment]
