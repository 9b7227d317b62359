"""Calculator: exact results, decimal rendering, refusal of anything that is not arithmetic, and finding the
arithmetic a plain-arithmetic question asks about."""

from __future__ import annotations

import pytest

from orchestra.types import Task, ToolContext
from tools.calculator import Calculator, CalculatorError, arithmetic_in, evaluate


def _ctx() -> ToolContext:
    return ToolContext(task=Task(id="t", problem="p", answer="a"))


@pytest.mark.parametrize("expression, exact, decimal", [
    ("1/3 + 1/6", "1/2", "0.5"),
    ("0.1 + 0.2", "3/10", "0.3"),  # exact, unlike floats
    ("2^10 - 24", "1000", "1000"),
    ("sqrt(8)", "2*sqrt(2)", "2.82842712474619009760337744842"),
    ("factorial(20) / factorial(18)", "380", "380"),
    ("sin(pi/6) + cos(0)", "3/2", "1.5"),
    ("7 // 2 + 7 % 3", "4", "4"),
    ("round(2.567, 2)", "257/100", "2.57"),
    ("gcd(12, 18) * lcm(4, 6)", "72", "72"),
    ("2**-3", "1/8", "0.125"),
])
def test_exact_values(expression, exact, decimal):
    assert evaluate(expression) == (exact, decimal)


@pytest.mark.parametrize("attack", [
    "__import__('os').system('echo pwned')",
    "().__class__.__bases__[0].__subclasses__()",
    "sqrt.__globals__",
    "(lambda: 1)()",
    "[x for x in range(3)]",
    "open('/etc/passwd')",
    "eval('1+1')",
    "'a' * 3",
    "x + 1",
    "sqrt(x=4)",
    "Symbol('x')",
    "9**9**9**9",  # would hang the machine if computed
    "factorial(10**7)",
    "1/0",
    "1 +",
    "",
    "1" * 2000,
])
def test_refusals_are_errors(attack):
    with pytest.raises(CalculatorError):
        evaluate(attack)


async def test_tool_call_results():
    tool = Calculator()
    ok = await tool.call({"expression": "(1/3 + 2^10) * 3"}, _ctx())
    assert ok.ok and ok.text == "3073" and ok.cost_usd == 0 and ok.meta["exact"] == "3073"
    approx = await tool.call({"expression": "22/7"}, _ctx())
    assert approx.text.startswith("22/7 ≈ 3.142857142857")
    bad = await tool.call({"expression": "__import__('os')"}, _ctx())
    assert not bad.ok and bad.error.startswith("calculator:")
    assert not (await tool.call({"expression": 5}, _ctx())).ok
    assert not (await tool.call({}, _ctx())).ok
    assert tool.schema()["function"]["name"] == "calculator"


@pytest.mark.parametrize("question, expression", [
    ("What is 17 * 23?", "17 * 23"),
    ("What is 17 × 23?", "17 * 23"),  # the calculator's own spellings, written as Python
    ("Compute (2 + 3)^2.", "(2 + 3)**2"),  # a full stop is not a decimal point
    ("what is 3 - -2", "3 - -2"),
    # not plain arithmetic: no operation, numbers outside the expression, dates, names, bombs
    ("What is -5?", None), ("In 1990, who won?", None), ("What is 2 + 2 in 3 words?", None),
    ("What is 15% of 80?", None), ("2024-01-05 + 1", None), ("Who wrote Hamlet?", None),
    ("What is 9**9**9?", None), ("What is __import__('os') + 1?", None), ("", None),
])
def test_arithmetic_in_questions(question, expression):
    assert arithmetic_in(question) == expression
