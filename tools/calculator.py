"""The calculator tool: exact arithmetic on one expression, through sympy's parser, never Python's eval.

An expression is first checked with Python's `ast` against an allow-list (numbers, + - * / // % **, unary
signs, parentheses, the names in FUNCTIONS and CONSTANTS, plain positional calls to those functions); any
other name, attribute, subscript, keyword, lambda, string or comprehension is refused before sympy sees it.
Then sympy parses it unevaluated (decimals become exact rationals) and it is evaluated bottom-up with size
guards (huge powers or factorials are refused instead of eating the machine). The answer is the exact value
(e.g. 7/3, sqrt(2)) plus a decimal rendering. Free tool: cost 0.
`arithmetic_in(question)` finds the one arithmetic expression a plain-arithmetic question asks about, through the
same checks (the simulated coder of tools/experts/sim.py writes it as a program for served questions).
"""

from __future__ import annotations

import ast
import re
import time
from typing import Any

from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult

MAX_CHARS = 1000
MAX_RESULT_BITS = 20_000  # an integer result of up to ~6,000 digits
MAX_FACTORIAL = 2_000
DIGITS = 30

# name a model may use -> sympy attribute
FUNCTIONS = {
    "sqrt": "sqrt", "cbrt": "cbrt", "root": "root", "exp": "exp", "log": "log", "ln": "log",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "atan2": "atan2",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "abs": "Abs", "Abs": "Abs", "floor": "floor",
    "ceiling": "ceiling", "ceil": "ceiling", "factorial": "factorial", "binomial": "binomial", "gcd": "gcd",
    "lcm": "lcm", "Rational": "Rational", "Mod": "Mod", "min": "Min", "max": "Max", "round": "_round",
}
CONSTANTS = {"pi": "pi", "E": "E", "e": "E", "I": "I", "oo": "oo"}
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
          ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)


class CalculatorError(ValueError):
    pass


def _check_ast(text: str) -> None:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"not a valid expression: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise CalculatorError(f"{type(node).__name__} is not allowed (only arithmetic and math functions)")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or
                                               not isinstance(node.value, (int, float, complex))):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS and node.id not in CONSTANTS:
            raise CalculatorError(f"unknown name {node.id!r}; allowed: {', '.join(sorted(FUNCTIONS))}, "
                                  f"{', '.join(sorted(CONSTANTS))}")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise CalculatorError("only the allowed math functions can be called")
            if node.keywords:
                raise CalculatorError("keyword arguments are not allowed")
        if isinstance(node, ast.Name) and node.id in FUNCTIONS and not _is_called(tree, node):
            raise CalculatorError(f"{node.id} is a function: call it, e.g. {node.id}(2)")


def _is_called(tree: ast.AST, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(tree))


def _functions() -> dict[str, Any]:
    import sympy

    def _round(x, nd=0):
        nd = int(nd)
        return sympy.Rational(round(sympy.Rational(x.evalf(DIGITS + 10)) * 10**nd), 10**nd)

    fns = {name: (_round if attr == "_round" else getattr(sympy, attr)) for name, attr in FUNCTIONS.items()}
    fns["factorial"] = _guard_factorial(fns["factorial"])
    return fns


def _guard_factorial(fn):
    def factorial(x):
        if x.is_Number and abs(x) > MAX_FACTORIAL:
            raise CalculatorError(f"factorial argument above {MAX_FACTORIAL}")
        return fn(x)
    return factorial


def _bits(x) -> int:
    if x.is_Integer:
        return abs(int(x)).bit_length()
    if x.is_Rational:
        return abs(int(x.p)).bit_length() + int(x.q).bit_length()
    return 0


def _check_size(x):
    if _bits(x) > 4 * MAX_RESULT_BITS:
        raise CalculatorError("result too large")
    return x


def _power(base, exp):
    import sympy

    if exp.is_number and base.is_number and abs(base) != 1 and base != 0:
        size = max(_bits(base), 1) if base.is_Rational else 64  # irrational bases stay symbolic; keep them small too
        if abs(float(exp)) * size > MAX_RESULT_BITS:
            raise CalculatorError(f"result too large: ({base})**({exp})")
    return sympy.Pow(base, exp)


def _build(node: ast.AST, fns: dict[str, Any]):
    """The checked AST as a sympy value, one guarded operation at a time (nothing is ever eval'ed)."""
    import sympy

    if isinstance(node, ast.Expression):
        return _build(node.body, fns)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, int):
            return sympy.Integer(node.value)
        if isinstance(node.value, float):
            return sympy.Rational(repr(node.value))  # 0.1 is exactly 1/10, as written
        return sympy.I * sympy.Rational(repr(node.value.imag)) + sympy.Rational(repr(node.value.real))
    if isinstance(node, ast.Name):
        return getattr(sympy, CONSTANTS[node.id])
    if isinstance(node, ast.UnaryOp):
        value = _build(node.operand, fns)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        a, b = _build(node.left, fns), _build(node.right, fns)
        op = type(node.op)
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and b == 0:
            raise CalculatorError("division by zero")
        if op is ast.Pow:
            return _check_size(_power(a, b))
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
               ast.FloorDiv: lambda: sympy.floor(a / b), ast.Mod: lambda: sympy.Mod(a, b)}
        return _check_size(ops[op]())
    if isinstance(node, ast.Call):
        return _check_size(fns[node.func.id](*[_build(arg, fns) for arg in node.args]))
    raise CalculatorError(f"{type(node).__name__} is not allowed")  # unreachable after _check_ast


def evaluate(expression: str) -> tuple[str, str]:
    """Return (exact, decimal) renderings of `expression`; raise CalculatorError with a clear message."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("expression must be a non-empty string")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    text = _python_syntax(expression)
    _check_ast(text)
    import sympy

    try:
        value = _build(ast.parse(text, mode="eval"), _functions())
        decimal = value.evalf(DIGITS)
    except CalculatorError:
        raise
    except (ZeroDivisionError, ValueError, TypeError, ArithmeticError, AttributeError, RecursionError) as e:
        raise CalculatorError(f"cannot evaluate: {type(e).__name__}: {e}") from None
    if value.has(sympy.zoo, sympy.nan) or value.free_symbols:
        raise CalculatorError("undefined result")
    return str(value), _render_decimal(decimal)


def _python_syntax(expression: str) -> str:
    return expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/").replace("−", "-")


# a run of characters an arithmetic expression without names can hold (numbers, operators, parentheses, spaces)
_ARITHMETIC_RUN = re.compile(r"[0-9.\s+\-*/^()×÷−%]+")


def arithmetic_in(question: str) -> str | None:
    """The arithmetic expression a plain-arithmetic question asks about, in Python syntax ("What is 17 * 23?" ->
    "17 * 23"), or None. Plain arithmetic means: exactly one run of number-and-operator characters holds digits
    (so "What is 2 + 2 in 3 words?" is not), it has at least one binary operation, and this calculator accepts
    and evaluates it (size guards included), so running it as a program is safe and gives the same value."""
    runs = [m.group().strip().rstrip(".").strip() for m in _ARITHMETIC_RUN.finditer(question or "")]
    runs = [r for r in runs if re.search(r"[0-9]", r)]
    if len(runs) != 1 or len(runs[0]) > MAX_CHARS:
        return None
    text = _python_syntax(runs[0])
    try:
        tree = ast.parse(text, mode="eval")
        if not any(isinstance(node, ast.BinOp) for node in ast.walk(tree)):
            return None  # a lone number: nothing to compute
        evaluate(text)
    except (SyntaxError, CalculatorError):
        return None
    return text


def _render_decimal(value) -> str:
    text = str(value)
    if "." in text and "e" not in text.lower() and "*" not in text:
        text = text.rstrip("0").rstrip(".") or "0"
    return text


class Calculator:
    """Tool "calculator": exact arithmetic on one expression."""

    name = "calculator"
    description = ("Evaluate one arithmetic expression exactly, e.g. '(3/7 + 2^10) * sqrt(2)'. Supports + - * / "
                   "// % ^ ** and sqrt, cbrt, root, exp, log/ln, sin, cos, tan, asin, acos, atan, sinh, cosh, "
                   "tanh, abs, floor, ceil, factorial, binomial, gcd, lcm, min, max, round, and pi, e, I. "
                   "Returns the exact value and a decimal approximation.")
    parameters = {"type": "object",
                  "properties": {"expression": {"type": "string", "description": "the expression to evaluate"}},
                  "required": ["expression"], "additionalProperties": False}

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return 0.0

    def example_args(self) -> dict[str, Any]:
        return {"expression": "(1/3 + 2^10) * 3"}

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        expression = args.get("expression") if isinstance(args, dict) else None
        try:
            exact, decimal = evaluate(expression)
        except CalculatorError as e:
            return ToolResult.failure(f"calculator: {e}", latency_s=time.perf_counter() - start)
        text = exact if exact == decimal else f"{exact} ≈ {decimal}"
        return ToolResult(text=text, latency_s=time.perf_counter() - start,
                          meta={"exact": exact, "decimal": decimal})

