"""The arithmetic checker of a reasoning step: every equation "expression = number" in the step is
evaluated safely (Python's `ast`, numbers and + - * / // % ** and parentheses only; never eval) and
compared with its right-hand side.

The search over steps uses it where the task has arithmetic (GSM8K-style problems): a step with a
false equation is worth 0 whatever the model's self-evaluation said.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100
"""Larger exponents are not evaluated (the equation is left unchecked), so a step cannot make the
checker compute a huge power."""

_EQUATION = re.compile(r"((?:[-($]\s*)*\d[-+*/×÷^().\d\s,$%x]*?)=\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")
_OPERATOR = re.compile(r"[-+*/×÷^x]")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class NotArithmetic(ValueError):
    """The text is not an expression the checker evaluates."""


@dataclass(frozen=True)
class StepCheck:
    """What the checker found in one step.

    Attributes:
        equations: equations evaluated (left side, right side as written).
        wrong: those whose left side does not equal the right (relative tolerance 1e-6).
    """

    equations: tuple[tuple[str, str], ...]
    wrong: tuple[tuple[str, str], ...]

    @property
    def checked(self) -> bool:
        """At least one equation, and all of them right."""
        return bool(self.equations) and not self.wrong


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression: numbers (thousands commas and "$" allowed), + - * /
    // % ** (also × ÷ ^ and "x" between numbers), unary + -, parentheses.

    Raises:
        NotArithmetic: anything else, a division by zero, an exponent above `MAX_EXPONENT`, or an
            expression over `MAX_EXPRESSION_CHARS`.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise NotArithmetic("expression too long")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", expression)
    text = text.replace("$", "").replace("×", "*").replace("÷", "/").replace("^", "**")
    text = re.sub(r"(?<=[\d)])\s*x\s*(?=[\d(])", "*", text)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise NotArithmetic(str(error)) from error
    return _value(tree.body)


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise NotArithmetic("exponent too large")
        try:
            return float(_BINARY[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError) as error:
            raise NotArithmetic(str(error)) from error
    raise NotArithmetic(f"{type(node).__name__} is not arithmetic")


def check_step(step: str) -> StepCheck:
    """Evaluates every "expression = number" of `step` whose left side holds an operator (a bare
    "x = 5" is not checked); equations the checker cannot evaluate are left out."""
    equations, wrong = [], []
    for match in _EQUATION.finditer(step):
        left, right = match.group(1).strip(), match.group(2)
        if not _OPERATOR.search(left.lstrip("-")) or not re.search(r"\d", left):
            continue
        try:
            value = evaluate(left)
            expected = float(right.replace(",", ""))
        except (NotArithmetic, ValueError):
            continue
        equations.append((left, right))
        if not math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
            wrong.append((left, right))
    return StepCheck(tuple(equations), tuple(wrong))
