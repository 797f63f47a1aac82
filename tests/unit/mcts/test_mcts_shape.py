"""The mcts service's shape stays readable (issues 14 and 30), read from the source with `ast`: no
numba kernel over 80 lines or 12 arguments (trees, scratch buffers and options travel as records,
`services.mcts.rollout.records` and `services.mcts.batched.kernels`), no other function over 60
lines, no module over 500 lines, and the layout of docs/services/mcts.md: the gRPC edge, the
vocabulary, the two engines, the games and the intrinsics each in their own subpackage, with only
the entry point, the settings and the metrics beside them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MCTS = Path(__file__).resolve().parents[3] / "services" / "mcts"
MAX_KERNEL_LINES = 80
MAX_FUNCTION_LINES = 60
MAX_KERNEL_ARGUMENTS = 12
MAX_MODULE_LINES = 500
SUBPACKAGES = {"api", "core", "rollout", "batched", "games", "native"}
TOP_LEVEL_MODULES = {"__init__.py", "main.py", "settings.py", "metrics.py"}


def _modules() -> list[Path]:
    return sorted(MCTS.rglob("*.py"))


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in _modules():
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
def test_no_function_is_over_its_limit(name: str, function: ast.FunctionDef) -> None:
    lines = function.end_lineno - function.lineno + 1
    limit = MAX_KERNEL_LINES if _is_kernel(function) else MAX_FUNCTION_LINES
    assert lines <= limit, f"{name} has {lines} lines (limit {limit})"


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


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(MCTS)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(MCTS)} has {lines} lines"


def test_the_service_is_laid_out_in_its_subpackages() -> None:
    top = {path.name for path in MCTS.glob("*.py")}
    packages = {path.parent.name for path in MCTS.glob("*/__init__.py")}
    assert (top, packages) == (TOP_LEVEL_MODULES, SUBPACKAGES)
