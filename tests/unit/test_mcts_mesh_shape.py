"""The command line's shape stays readable (issue 30), read from the source with `ast`, like the
services' (tests/unit/mcts/test_mcts_shape.py, tests/unit/orchestrator/test_orchestrator_shape.py):
no function in mcts_mesh/ over 60 lines, no module over 500; the `mcts-mesh` command is a package
with one module per command group, each adding its own commands (`register(subparsers)`), and its
modules import one another without a cycle (the import-linter contract, seen failing here on a
planted cycle)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MCTS_MESH = ROOT / "mcts_mesh"
CLI = MCTS_MESH / "cli"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
COMMAND_GROUPS = {"serve", "solve", "puzzles", "query", "train", "az", "keys", "models", "runs"}
SHARED = {"__init__.py", "__main__.py", "common.py", "progress.py"}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _modules() -> list[Path]:
    return sorted(MCTS_MESH.rglob("*.py"))


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(ROOT)}:{node.name}", node))
    return found


def test_the_scan_sees_the_command_line() -> None:
    names = {name for name, _ in _functions()}
    # (Guards the checks below against a scan that finds nothing.)
    assert {"mcts_mesh/cli/__init__.py:build_parser", "mcts_mesh/cli/serve.py:cmd_up",
            "mcts_mesh/launcher.py:start_mesh"} <= names


@pytest.mark.parametrize("name,function", _functions(), ids=lambda value: (
    value if isinstance(value, str) else ""))
def test_no_function_is_over_60_lines(name: str, function: ast.FunctionDef) -> None:
    lines = function.end_lineno - function.lineno + 1
    assert lines <= MAX_FUNCTION_LINES, f"{name} has {lines} lines"


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_each_command_group_adds_its_own_commands() -> None:
    modules = {path.name for path in CLI.glob("*.py")}
    assert modules == SHARED | {f"{group}.py" for group in COMMAND_GROUPS}
    for group in COMMAND_GROUPS:
        tree = ast.parse((CLI / f"{group}.py").read_text())
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "register" in functions, group


def _write(root: Path, module: str, text: str = "") -> None:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for package in path.parents:
        if package == root:
            break
        (package / "__init__.py").touch()
    path.write_text(text)


def test_the_acyclic_contract_catches_a_cycle_among_the_command_groups(tmp_path) -> None:
    """The repository's contract on a planted copy: two command groups importing each other (the
    shape of the old cli <-> progress <-> puzzle_commands cycle) break it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in contracts["contracts"] if c.get("ancestors") and
                  "mcts_mesh.cli" in c["ancestors"]]
    assert contract["type"] == "acyclic_siblings"
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_packages =\n    mcts_mesh\n\n[importlinter:contract:1]\n"
        f"name = {contract['name']}\ntype = acyclic_siblings\nancestors =\n    "
        + "\n    ".join(contract["ancestors"]) + "\n")
    _write(tmp_path, "mcts_mesh.cli.solve", "from mcts_mesh.cli import progress\n")
    _write(tmp_path, "mcts_mesh.cli.progress", "from mcts_mesh.cli.solve import x\n")
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "0 kept, 1 broken" in run.stdout, run.stdout
    (tmp_path / "mcts_mesh" / "cli" / "progress.py").write_text("")
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert run.returncode == 0, run.stdout + run.stderr
