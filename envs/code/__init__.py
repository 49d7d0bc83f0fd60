"""Code envs: functions and stdin/stdout programs graded by sandboxed tests (see `env.py`).

Datasets: `make("code/functions-v0", source="path/to/mbpp.jsonl")` reads HumanEval, MBPP,
LiveCodeBench or native JSONL (`problems.py`).
"""

from ..registration import register

_ENV = "agentrl.envs.code.env:CodeEnv"

register(
    "code/functions-v0",
    _ENV,
    description="Write a Python function (generated problems); reward = test pass fraction",
    source="builtin-functions",
)
register(
    "code/stdio-v0",
    _ENV,
    description="Write a stdin/stdout program (generated problems); reward = case pass fraction",
    source="builtin-stdio",
)
register(
    "code/mixed-multiturn-v0",
    _ENV,
    description="Generated function + stdio problems, with a run_tests tool on example tests",
    source="builtin",
    multi_turn=True,
)
register(
    "code/humaneval-v0",
    _ENV,
    description="HumanEval (164 problems, needs agentrl[code]); reward = check() passes",
    source="humaneval",
)
register(
    "code/humaneval-multiturn-v0",
    _ENV,
    description="HumanEval with a run_tests tool on asserts from each check()",
    source="humaneval",
    multi_turn=True,
)
