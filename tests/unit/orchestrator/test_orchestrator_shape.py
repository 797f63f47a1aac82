"""The code's shape stays readable (issue 30), read from the source with `ast`, like the mcts
service's (tests/unit/mcts/test_mcts_shape.py): in every package (services, libs, mcts_mesh,
training) no function over 60 lines (numba kernels: 80), no module over 500 lines (generated stubs
aside); in the orchestrator, no function defined inside another only to import something, and the
layout of DESIGN.md: the gRPC edge, the loop, routing, the problem types, the text path, the agents
and access each in their own subpackage, with only the entry point, the settings, the metrics and
the dependency watcher beside them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ORCHESTRATOR = ROOT / "services" / "orchestrator"
LIBS = ROOT / "libs"
MAX_KERNEL_LINES = 80
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
SUBPACKAGES = {"api", "loop", "routing", "problems", "text", "agents", "access", "runs"}
TOP_LEVEL_MODULES = {"__init__.py", "main.py", "settings.py", "metrics.py", "dependencies.py"}


PACKAGES = ("services", "libs", "mcts_mesh", "training")
"""Every package of the product: the size limits hold in all of them (the mcts service and the
command line have shape tests of their own for what is particular to them)."""


def _modules() -> list[Path]:
    found = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return [path for path in found if "stubs" not in path.relative_to(ROOT).parts]


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(ROOT)}:{node.name}", node))
    return found


def _is_kernel(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated by numba: `@njit`, `@njit(...)`, `@jit`, `@overload(...)` or `@intrinsic`."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("njit", "jit", "overload", "intrinsic"):
            return True
    return False


def test_the_scan_sees_every_package() -> None:
    names = {name for name, _ in _functions()}
    # (Guards the checks below against a scan that finds nothing.)
    assert {"services/orchestrator/api/servicer.py:SolveProblem",
            "services/orchestrator/loop/tally.py:aggregate",
            "libs/rest/app.py:build_rest_app", "libs/connect4/solver.py:_negamax",
            "services/retrieval/onnx_export.py:export_embedder",
            "services/neural/reasoning_segments.py:run_segments",
            "training/az/loop.py:train_connect4_az", "mcts_mesh/launcher.py:start_mesh"} <= names
    assert not any("/stubs/" in name for name in names)


@pytest.mark.parametrize("name,function", _functions(), ids=lambda value: (
    value if isinstance(value, str) else ""))
def test_no_function_is_over_its_limit(name: str, function: ast.FunctionDef) -> None:
    lines = function.end_lineno - function.lineno + 1
    limit = MAX_KERNEL_LINES if _is_kernel(function) else MAX_FUNCTION_LINES
    assert lines <= limit, f"{name} has {lines} lines (limit {limit})"


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_no_function_imports_inside_its_body() -> None:
    """An import inside a function hides a dependency (and, where there is one, a cycle) from
    the import contracts; the orchestrator's modules import at the top."""
    hidden = []
    for path in sorted(ORCHESTRATOR.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        hidden.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert hidden == []


def test_the_orchestrator_is_grouped_by_concern() -> None:
    packages = {path.name for path in ORCHESTRATOR.iterdir()
                if path.is_dir() and (path / "__init__.py").exists()}
    modules = {path.name for path in ORCHESTRATOR.glob("*.py")}
    assert packages == SUBPACKAGES
    assert modules == TOP_LEVEL_MODULES
