"""The calculator tool: exact arithmetic, and every value bounded in size."""

from __future__ import annotations

from fractions import Fraction

import pytest

from agentrl.envs import make
from agentrl.tools.calculator import MAX_BITS, evaluate
from agentrl.types import Message, ToolCall


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(3+4)*12", Fraction(84)),
        ("2**64", Fraction(2**64)),
        ("9**64", Fraction(9**64)),
        ("2**-64", Fraction(1, 2**64)),
        ("(2**63)**64", Fraction(2**4032)),
        ("1/3 + 1/7", Fraction(10, 21)),
        ("7 // 2 + 7 % 2", Fraction(4)),
    ],
)
def test_exact_values(expression: str, value: Fraction) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "(((9**64)**64)**64)**64",  # each power within |exponent| <= 64; ~30 s holding the GIL
        "(9**64)**64",
        "(2**64)**64",
        "(2**64)**63 * 2**64",
        "(2**63)**64 * (2**63)**64",
        "1 / (2**63)**64 / 2**64",
    ],
)
def test_oversized_values_are_refused(expression: str) -> None:
    with pytest.raises(ValueError, match=f"result too large \\(over {MAX_BITS} bits\\)"):
        evaluate(expression)


def test_runaway_power_is_a_tool_error_in_an_episode() -> None:
    env = make("math/calc-v0")
    env.reset(seed=0)
    call = ToolCall("calculator", {"expression": "(((9**64)**64)**64)**64"}, id="c0")
    obs, reward, done, _, _ = env.step(Message("assistant", "", tool_calls=[call]))
    assert not done and reward == 0.0
    assert obs.messages[0].content == (
        f"Error: ValueError: result too large (over {MAX_BITS} bits)"
    )


@pytest.mark.parametrize(
    "expression",
    [
        "(2**62)**64 / 3",
        "-(2**62)**64 / 3",
        "1 / (3 * (2**62)**64)",
        "(2**62)**64 / 7 + 1/2",
        "1 / (3 * (2**62)**17 * 2**16)",  # 2**-1070: a subnormal float, too few digits
    ],
)
def test_non_integers_beyond_floats_are_formatted(expression: str) -> None:
    """A non-integer too large (or too small) for a float: 6 significant digits, not an
    OverflowError (or a 0 for a value that is not 0)."""
    from decimal import Decimal

    from agentrl.tools.calculator import format_number

    exact = evaluate(expression)
    shown = format_number(exact)
    assert abs(Fraction(Decimal(shown)) / exact - 1) < Fraction(1, 10**5), shown
    env = make("math/calc-v0")
    env.reset(seed=0)
    call = ToolCall("calculator", {"expression": expression}, id="c0")
    obs, *_ = env.step(Message("assistant", "", tool_calls=[call]))
    assert obs.messages[0].content == shown


def test_format_number_keeps_floats_short_form() -> None:
    from agentrl.tools.calculator import format_number

    assert [format_number(Fraction(n, d)) for n, d in [(10, 21), (1, 3), (3, 2), (84, 1)]] == [
        "0.47619",
        "0.333333",
        "1.5",
        "84",
    ]
    assert format_number(evaluate("(2**62)**64 / 3")) == "1.02306e+1194"
