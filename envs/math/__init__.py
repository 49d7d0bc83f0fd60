"""Math envs: arithmetic and word problems with a calculator, boxed-answer math checked by
math-verify, and (when the sandbox interpreter is available) math with a Python tool."""

from ..registration import register

register(
    "math/calc-v0",
    "agentrl.envs.math.calc:CalcEnv",
    description="Arithmetic with a calculator tool (3 operands)",
)
register(
    "math/calc-easy-v0",
    "agentrl.envs.math.calc:CalcEnv",
    description="Arithmetic with a calculator tool (2 operands, small numbers)",
    n_operands=2,
    max_value=20,
)
register(
    "math/calc-mul-v0",
    "agentrl.envs.math.calc:CalcEnv",
    description="Two-digit multiplication with a calculator tool (small real models fail it alone)",
    n_operands=2,
    min_value=10,
    max_value=99,
    ops="*",
)
register(
    "math/boxed-v0",
    "agentrl.envs.math.boxed:BoxedMathEnv",
    description="Single-turn \\boxed{} math verified by math-verify (generated, or data_path=)",
)
register(
    "math/boxed-hard-v0",
    "agentrl.envs.math.boxed:BoxedMathEnv",
    description="Single-turn \\boxed{} math, generated level 3 (fractions, equations, percents)",
    level=3,
)
register(
    "math/word-v0",
    "agentrl.envs.math.word:WordProblemEnv",
    description="Arithmetic word problems with a calculator tool (level 1)",
)
register(
    "math/word-hard-v0",
    "agentrl.envs.math.word:WordProblemEnv",
    description="Multi-step word problems with a calculator tool (level 3)",
    level=3,
)
register(
    "math/python-v0",
    "agentrl.envs.math.python:PythonMathEnv",
    description="Math with a sandboxed Python interpreter tool, \\boxed{} answer (level 2)",
)
