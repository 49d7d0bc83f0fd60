"""verl compatibility: translate a verl PPO/GRPO YAML into an agentrl config
(`agentrl config import-verl`). See `importer` for what is mapped and what is reported."""

from .importer import META, ImportResult, flatten, import_verl, to_yaml

__all__ = ["META", "ImportResult", "flatten", "import_verl", "to_yaml"]
