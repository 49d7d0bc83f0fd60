"""SWE envs: repository-level bug fixing in a sandboxed, persistent workspace (see `env.py`).

Tasks come from real PyPI source distributions with injected bugs (`tasks.py`, `mutate.py`);
`scripts/build-swe-tasks.py` rebuilds or extends the shipped set from a seed.
"""

from ..registration import register

_ENV = "agentrl.envs.swe.env:SweEnv"

register(
    "swe/pyrepo-v0",
    _ENV,
    description="Fix an injected bug in a real PyPI package (hidden tests); bash/view/edit/test tools",
)
register(
    "swe/tiny-repo-v0",
    _ENV,
    description="Fix an injected bug in a tiny generated repo (quickstart scale); same tools",
    package="minilib",
    max_turns=12,
)
