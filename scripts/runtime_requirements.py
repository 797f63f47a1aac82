"""Writes deploy/requirements-runtime.txt: the packages the services need at run time, at the
versions of requirements.lock, and nothing else (no test, lint or code-generation tools).

The set is the transitive closure of pyproject.toml's [project] dependencies, read from the
metadata of the packages installed in the running environment (`make setup` installs the lock).
deploy/image.sh installs torch first from the index of the build it wants (the PyTorch CPU index
for deploy/Dockerfile, PyPI's CUDA build for deploy/Dockerfile.gpu); `torch==<version>` here is
then already satisfied by `<version>+cpu` or the CUDA build.

    .venv/bin/python scripts/runtime_requirements.py          # write the file
    .venv/bin/python scripts/runtime_requirements.py --check  # exit 1 when the file is stale
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "deploy" / "requirements-runtime.txt"
# Installed with the virtual environment itself (python -m venv), not pinned in the lock.
BOOTSTRAP = {"pip", "setuptools", "wheel"}
HEADER = ("# Written by scripts/runtime_requirements.py from pyproject.toml and"
          " requirements.lock; do not edit.\n"
          "# The services' run-time packages only (deploy/Dockerfile installs them).\n")


def locked() -> dict[str, tuple[str, str]]:
    """{canonical name: (name as written, version)} from requirements.lock."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = (name.strip(), version.strip())
    return pins


def closure(roots: list[str]) -> set[str]:
    """Canonical names of `roots` and of everything they require (markers evaluated, no extras
    beyond those named)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = requirement.extras
        key = name if not extras else f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        for text in metadata.requires(requirement.name) or []:
            child = Requirement(text)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(e) for e in environments):
                todo.append(child)
    return {n for n in seen if "[" not in n}


def render() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = locked()
    lines = []
    for name in sorted(closure(project["dependencies"]) - BOOTSTRAP):
        if name not in pins:
            raise SystemExit(f"runtime_requirements: {name} is required but not in the lock")
        written, version = pins[name]
        lines.append(f"{written}=={version}\n")
    return HEADER + "".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run scripts/runtime_requirements.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
