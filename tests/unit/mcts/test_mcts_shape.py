"""The search core's shape stays readable (issue 14), read from the source with `ast`: no function
in `services/mcts/` over 80 lines, no numba kernel over 12 arguments (trees, scratch buffers and
options travel as records, `services.mcts.rollout.records` and `services.mcts.batched.kernels`), and
`engine.py` and `batched.py` under 700 lines each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MCTS = Path(__file__).resolve().parents[3] / "services" / "mcts"
MAX_FUNCTION_LINES = 80
MAX_KERNEL_ARGUMENTS = 12
MAX_MODULE_LINES = {"rollout/engine.py": 700, "batched/search.py": 700}


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(MCTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(MCTS)}:{node.name}", node))
    return found


def _is_kernel(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated by numba: `@njit`, `@njit(...)`, `@overload(...)` or `@intrinsic`."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("njit", "jit", "overload", "intrinsic"):
            return True
    return False


def test_the_scan_sees_the_kernels() -> None:
    names = {name for name, function in _functions() if _is_kernel(function)}
    # (Guards the checks below against a scan that finds nothing.)
    assert {"rollout/kernel.py:run_simulations", "rollout/shared_kernel.py:run_shared_simulations",
            "rollout/shared_kernel.py:descend", "batched/kernels.py:run_batches"} <= names


@pytest.mark.parametrize("name,function", _functions(), ids=lambda value: (
    value if isinstance(value, str) else ""))
def test_no_function_is_over_80_lines(name: str, function: ast.FunctionDef) -> None:
    lines = function.end_lineno - function.lineno + 1
    assert lines <= MAX_FUNCTION_LINES, f"{name} has {lines} lines"


def test_no_kernel_takes_more_than_12_arguments() -> None:
    too_many = {}
    for name, function in _functions():
        if _is_kernel(function):
            arguments = function.args
            count = (len(arguments.posonlyargs) + len(arguments.args)
                     + len(arguments.kwonlyargs))
            if count > MAX_KERNEL_ARGUMENTS:
                too_many[name] = count
    assert too_many == {}


@pytest.mark.parametrize("module", sorted(MAX_MODULE_LINES))
def test_engine_and_batched_stay_under_700_lines(module: str) -> None:
    lines = len((MCTS / module).read_text().splitlines())
    assert lines < MAX_MODULE_LINES[module], f"{module} has {lines} lines"
