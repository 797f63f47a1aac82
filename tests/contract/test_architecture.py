"""The architecture the DESIGN describes, checked by import-linter (contracts in pyproject.toml's
`[tool.importlinter]`): no service imports another service's package, serving (services/, libs/)
never imports the training package, the mcts search core imports no grpc (only its gRPC edge
does: servicers, main, the neural client), the orchestrator's layers import only those below
them, libs imports no service, and no import cycle joins the orchestrator's or the libs'
modules."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_the_repository_keeps_its_import_contracts(repo_root):
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=repo_root, capture_output=True,
                         text=True, timeout=300)
    contracts = tomllib.loads((repo_root / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(contracts['contracts'])} kept, 0 broken" in run.stdout, run.stdout


def _write(root: Path, module: str, text: str = "") -> None:
    """Module `module` as a package (its `__init__.py` holding `text`), parents included."""
    path = root.joinpath(*module.split("."))
    path.mkdir(parents=True, exist_ok=True)
    for package in [path, *path.parents]:
        if package == root:
            break
        (package / "__init__.py").touch()
    (path / "__init__.py").write_text(text)


def test_the_contracts_catch_a_service_importing_another_and_grpc_in_the_core(repo_root, tmp_path):
    """The repository's own contracts, on a copy of its package layout with three bad imports:
    each is reported, so the contracts are not vacuous."""
    config = tomllib.loads((repo_root / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[importlinter]", "root_packages =\n    " + "\n    ".join(config["root_packages"]),
             "include_external_packages = True"]
    for i, contract in enumerate(config["contracts"]):
        lines.append(f"[importlinter:contract:{i}]")
        for key, value in contract.items():
            value = "\n    ".join(value) if isinstance(value, list) else value
            lines.append(f"{key} = {value}" if "\n" not in value else f"{key} =\n    {value}")
    (tmp_path / ".importlinter").write_text("\n".join(lines) + "\n")
    _write(tmp_path, "libs.errors")
    _write(tmp_path, "mcts_mesh.cli")
    for contract in config["contracts"]:
        for module in (contract.get("modules", []) + contract.get("source_modules", [])
                       + contract.get("ancestors", [])):
            _write(tmp_path, module)
        for container in contract.get("containers", []):
            for layer in contract.get("layers", []):
                for name in layer.split("|"):
                    _write(tmp_path, f"{container}.{name.strip()}")
    _write(tmp_path, "services.mcts.api.servicer", "import grpc\n")
    _write(tmp_path, "services.mcts.rollout.engine", "from services.mcts.core import tree\n")
    _write(tmp_path, "services.mcts.core.tree", "import grpc\n")
    _write(tmp_path, "services.neural.training", "from services.mcts.rollout import engine\n")
    _write(tmp_path, "training.reasoning")
    _write(tmp_path, "services.neural.reasoning_task", "from training import reasoning\n")
    run = _lint(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{len(config['contracts']) - 3} kept, 3 broken" in run.stdout, run.stdout
    assert "services.neural.training -> services.mcts.rollout.engine" in run.stdout, run.stdout
    assert "services.mcts.core.tree -> grpc" in run.stdout, run.stdout
    assert "services.neural.reasoning_task -> training.reasoning" in run.stdout, run.stdout
    assert "services.mcts.api.servicer" not in run.stdout, run.stdout
