"""The documentation site: its generated pages equal a fresh generation from the code, it builds
with `mkdocs build --strict` (no warning, no broken internal link or anchor), and the README stays
a page a newcomer reads in five minutes.

A setting, RPC, route, command or metric added without `make docs-gen` fails the first test; a
page that links to a missing page or heading fails the second.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(900)


def _env(repo_root: Path) -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1",  # Material's banner about its successor
            "PATH": f"{repo_root / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def test_generated_pages_equal_a_fresh_generation(repo_root):
    result = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=repo_root,
                            env=_env(repo_root), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_site_builds_strict_without_network(repo_root, tmp_path):
    mkdocs = repo_root / ".venv" / "bin" / "mkdocs"
    site = tmp_path / "site"
    result = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(site)],
                            cwd=repo_root, env=_env(repo_root), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (site / "reference" / "settings" / "index.html").is_file()


def test_readme_is_short_and_starts_with_the_two_commands(repo_root):
    lines = (repo_root / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines (at most 200)"
    commands = [line.split("#")[0].strip() for line in lines if line.startswith("make ")]
    assert commands[:2] == ["make run", "make test"]


def test_docs_speak_of_the_product_not_of_issues(repo_root):
    pages = [repo_root / "README.md", repo_root / "CHANGELOG.md",
             *sorted((repo_root / "docs").rglob("*.md"))]
    found = [f"{page.relative_to(repo_root)}:{number}: {line.strip()}"
             for page in pages
             for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bissues? #?\d+|\bissue-\d+", line, re.IGNORECASE)]
    assert not found, "\n".join(found)


def test_every_setting_has_a_description(repo_root):
    """The settings reference is only as good as the docstrings: each field of each service's
    settings class says what it does (a string right after the field, or `description=`)."""
    sys.path.insert(0, str(repo_root))
    try:
        from scripts.docs_gen.settings import undocumented
    finally:
        sys.path.remove(str(repo_root))
    missing = undocumented()
    assert not missing, f"settings without a description: {missing}"
