"""`agentrl doctor`: preflight checks that catch a broken run before it costs GPU time.

    findings = run_doctor(load_config(TrainConfig, "configs/x.yaml"))
    # each Finding(level="OK"|"WARN"|"FAIL", title, detail, fix, section)

Covers the installed stack, sandbox isolation, the chat template, whether the configured
env's tools reach the prompt and can be parsed back (tools that never fire), token budgets
against the model context and the first prompt, and a CPU dry run with the env's oracle. `run_red_team(env_id)` (`--red-team`) plays the
adversarial probes (`probes.py`) against an env's reward and FAILs each one that gets paid.
"""

from .checks import Finding
from .redteam import run_red_team
from .runner import exit_code, run_doctor

__all__ = ["Finding", "exit_code", "run_doctor", "run_red_team"]
