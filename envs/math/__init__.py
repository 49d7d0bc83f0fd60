"""Math envs: arithmetic with a calculator, verified boxed-answer math."""

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
